#include "framework/cache/redis_semantic_store.h"

#include <cstring>

#include <boost/json.hpp>

#include "framework/cache/answer_codec.h"
#include "framework/cache/redis_exact_store.h"
#include "framework/security/crypto.h"
#include "framework/storage/failure_log.h"
#include "framework/storage/redis_client.h"

namespace chatflow::cache {
namespace json = boost::json;
namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string vector_text(const std::vector<float>& vector) {
  return security::base64url_encode(std::string_view(reinterpret_cast<const char*>(vector.data()),
                                                     vector.size() * sizeof(float)));
}

std::vector<float> vector_of(std::string_view text, size_t dimensions) {
  auto bytes = security::base64url_decode(text);
  if (!bytes || bytes->size() != dimensions * sizeof(float))
    throw std::runtime_error("a shared entry's vector has the wrong length");
  std::vector<float> vector(dimensions);
  std::memcpy(vector.data(), bytes->data(), bytes->size());
  return vector;
}

// An entry as stored: its partition, context, question, vector, answer and end (Unix ms, the
// writer's clock: the local expiry only has to be about right, Redis removes the key on time).
std::string entry_json(const std::string& partition, const SemanticEntry& entry,
                       int64_t expires_ms) {
  return json::serialize(json::object{{"partition", partition},
                                      {"context", entry.context},
                                      {"question", entry.question},
                                      {"vector", vector_text(entry.vector)},
                                      {"answer", encode_answer(*entry.answer)},
                                      {"expires_ms", expires_ms}});
}

// The partition and entry of a stored JSON; throws std::runtime_error when damaged.
std::pair<std::string, SemanticEntry> entry_of(std::string_view text, const std::string& id,
                                               size_t dimensions) {
  json::error_code error;
  json::value parsed = json::parse(text, error);
  if (error || !parsed.is_object()) throw std::runtime_error("a shared entry is not JSON");
  try {
    const json::object& object = parsed.as_object();
    int64_t left_ms = object.at("expires_ms").as_int64() - unix_ms();
    auto expires = std::chrono::steady_clock::now() + std::chrono::milliseconds(left_ms);
    SemanticEntry entry;
    entry.id = id;
    entry.context = object.at("context").as_string();
    entry.question = object.at("question").as_string();
    entry.vector = vector_of(object.at("vector").as_string(), dimensions);
    entry.answer = decode_answer(object.at("answer").as_string(), expires);
    return {std::string(object.at("partition").as_string()), std::move(entry)};
  } catch (const std::invalid_argument& failure) {
    throw std::runtime_error(failure.what());
  } catch (const std::out_of_range& failure) {
    throw std::runtime_error(failure.what());
  }
}

}  // namespace

RedisSemanticStore::RedisSemanticStore(std::shared_ptr<redis::Client> client,
                                       RedisSemanticOptions options,
                                       std::shared_ptr<storage::FailureLog> failures)
    : client_(std::move(client)),
      options_(std::move(options)),
      failures_(std::move(failures)),
      stream_key_(options_.key_prefix + "stream"),
      index_(std::make_shared<SemanticIndex>(options_.dimensions, options_.max_entries)) {
  std::unique_ptr<redis::Connection> connection;
  std::string position;
  try {
    connection = client_->connect_dedicated(options_.block + client_->options().command_timeout);
    position = rebuild(*connection);
    in_step_ = true;
  } catch (const redis::Error& error) {
    connection.reset();
    report(error.what());
  }
  follower_ = std::thread([this, connection = std::move(connection), position]() mutable {
    follow(std::move(connection), std::move(position));
  });
}

void RedisSemanticStore::report(const std::string& error) {
  failures_->failed(error, "the semantic cache misses until its index is rebuilt from Redis");
}

RedisSemanticStore::~RedisSemanticStore() {
  {
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
  }
  stop_changed_.notify_all();
  follower_.join();
}

std::shared_ptr<SemanticIndex> RedisSemanticStore::index() const {
  std::lock_guard lock(index_mutex_);
  return index_;
}

void RedisSemanticStore::insert(const std::string& partition, SemanticEntry entry,
                                std::chrono::milliseconds ttl) {
  entry.id = security::random_hex(16);
  std::string id = entry.id;
  int64_t expires_ms = unix_ms() + ttl.count();
  std::string stored = entry_json(partition, entry, expires_ms);
  index()->insert(partition, std::move(entry));
  std::string milliseconds = std::to_string(std::max<int64_t>(1, ttl.count()));
  for (const auto& reply : client_->pipeline(
           {{"SET", options_.key_prefix + "entry:" + id, stored, "PX", milliseconds},
            {"XADD", stream_key_, "MAXLEN", "~", std::to_string(options_.stream_length), "*", "op",
             "insert", "id", id, "entry", stored}}))
    redis::expect_ok(reply, *client_, "storing a semantic-cache entry");
}

size_t RedisSemanticStore::forget(const std::string& prefix, const std::string& context,
                                  const std::vector<float>* near, float threshold) {
  std::vector<std::string> ids;
  size_t removed = index()->forget(prefix, context, near, threshold, &ids);
  std::vector<redis::Command> commands;
  for (const auto& id : ids)
    commands.push_back({"DEL", options_.key_prefix + "entry:" + id});
  // Every replica applies the same correction to its own index.
  commands.push_back({"XADD", stream_key_, "MAXLEN", "~", std::to_string(options_.stream_length),
                      "*", "op", "forget", "prefix", prefix, "context", context, "vector",
                      near ? vector_text(*near) : "", "threshold", std::to_string(threshold)});
  for (const auto& reply : client_->pipeline(commands))
    redis::expect_ok(reply, *client_, "forgetting semantic-cache entries");
  return removed;
}

void RedisSemanticStore::apply(const std::vector<std::pair<std::string, std::string>>& fields) {
  auto field = [&](const std::string& name) -> const std::string* {
    for (const auto& [key, value] : fields)
      if (key == name) return &value;
    return nullptr;
  };
  const std::string* op = field("op");
  if (!op) return;
  if (*op == "insert") {
    const std::string* id = field("id");
    const std::string* stored = field("entry");
    if (!id || !stored) return;
    auto [partition, entry] = entry_of(*stored, *id, options_.dimensions);
    index()->insert(partition, std::move(entry));
  } else if (*op == "forget") {
    const std::string* prefix = field("prefix");
    const std::string* context = field("context");
    const std::string* vector = field("vector");
    const std::string* threshold = field("threshold");
    if (!prefix || !context || !vector || !threshold) return;
    if (vector->empty()) {
      index()->forget(*prefix, *context, nullptr, 0);
    } else {
      std::vector<float> near = vector_of(*vector, options_.dimensions);
      index()->forget(*prefix, *context, &near, std::stof(*threshold));
    }
  }
}

// A fresh index from every stored entry; returns the stream position it is current to.
std::string RedisSemanticStore::rebuild(redis::Connection& connection) {
  redis::Reply last = connection.command({"XREVRANGE", stream_key_, "+", "-", "COUNT", "1"});
  std::string position = "0-0";
  if (last.kind == redis::Reply::Kind::array && !last.elements.empty() &&
      !last.elements[0].elements.empty())
    position = last.elements[0].elements[0].text;
  auto fresh = std::make_shared<SemanticIndex>(options_.dimensions, options_.max_entries);
  std::string entry_prefix = options_.key_prefix + "entry:";
  std::string cursor = "0";
  do {
    redis::Reply page = connection.command(
        {"SCAN", cursor, "MATCH", escape_glob(entry_prefix) + "*", "COUNT", "500"});
    if (page.kind != redis::Reply::Kind::array || page.elements.size() != 2)
      throw redis::Error("redis " + client_->endpoint().name() + ": SCAN failed: " + page.text);
    cursor = page.elements[0].text;
    const auto& keys = page.elements[1].elements;
    if (keys.empty()) continue;
    redis::Command mget = {"MGET"};
    for (const auto& key : keys)
      mget.push_back(key.text);
    redis::Reply values = connection.command(mget);
    for (size_t i = 0; i < keys.size() && i < values.elements.size(); ++i) {
      if (values.elements[i].kind != redis::Reply::Kind::string) continue;  // expired meanwhile
      try {
        auto [partition, entry] = entry_of(
            values.elements[i].text, keys[i].text.substr(entry_prefix.size()), options_.dimensions);
        fresh->insert(partition, std::move(entry));
      } catch (const std::runtime_error& error) {
        report(keys[i].text + " skipped: " + error.what());
      }
    }
  } while (cursor != "0");
  std::lock_guard lock(index_mutex_);
  index_ = std::move(fresh);
  return position;
}

bool RedisSemanticStore::wait_or_stop(std::chrono::milliseconds pause) {
  std::unique_lock lock(stop_mutex_);
  return stop_changed_.wait_for(lock, pause, [this] { return stopping_; });
}

void RedisSemanticStore::follow(std::unique_ptr<redis::Connection> connection,
                                std::string position) {
  auto stopping = [this] {
    std::lock_guard lock(stop_mutex_);
    return stopping_;
  };
  while (!stopping()) {
    try {
      if (!connection) {
        connection =
            client_->connect_dedicated(options_.block + client_->options().command_timeout);
        position = rebuild(*connection);
        in_step_ = true;
        failures_->succeeded();
      }
      redis::Reply reply = connection->command({"XREAD", "COUNT", "256", "BLOCK",
                                                std::to_string(options_.block.count()), "STREAMS",
                                                stream_key_, position});
      if (reply.kind == redis::Reply::Kind::error)
        throw redis::Error("redis " + client_->endpoint().name() + ": XREAD failed: " + reply.text);
      if (reply.kind != redis::Reply::Kind::array) continue;  // nothing new within the block
      for (const auto& stream : reply.elements) {
        if (stream.elements.size() != 2) continue;
        for (const auto& message : stream.elements[1].elements) {
          if (message.elements.size() != 2) continue;
          position = message.elements[0].text;
          std::vector<std::pair<std::string, std::string>> fields;
          const auto& words = message.elements[1].elements;
          for (size_t i = 0; i + 1 < words.size(); i += 2)
            fields.emplace_back(words[i].text, words[i + 1].text);
          try {
            apply(fields);
          } catch (const std::exception& error) {
            report("stream message " + position + " skipped: " + error.what());
          }
        }
      }
    } catch (const redis::Error& error) {
      in_step_ = false;
      connection.reset();
      report(error.what());
      if (wait_or_stop(std::chrono::milliseconds(500))) return;
    }
  }
}

}  // namespace chatflow::cache
