#include "framework/storage/redis_client.h"

#include <charconv>

#include <hiredis/hiredis.h>
#include <openssl/evp.h>

#include "framework/net/socket_stream.h"

namespace chatflow::redis {
namespace {

using Clock = std::chrono::steady_clock;

int parse_number(const std::string& text, const std::string& what, const std::string& url) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0) {
    throw std::invalid_argument("redis URL '" + url + "': " + what + " '" + text +
                                "' is not a number");
  }
  return value;
}

Reply copy_reply(const redisReply* reply) {
  Reply copy;
  switch (reply->type) {
    case REDIS_REPLY_STRING:
      copy.kind = Reply::Kind::string;
      copy.text.assign(reply->str, reply->len);
      break;
    case REDIS_REPLY_STATUS:
      copy.kind = Reply::Kind::status;
      copy.text.assign(reply->str, reply->len);
      break;
    case REDIS_REPLY_ERROR:
      copy.kind = Reply::Kind::error;
      copy.text.assign(reply->str, reply->len);
      break;
    case REDIS_REPLY_INTEGER:
      copy.kind = Reply::Kind::integer;
      copy.integer = reply->integer;
      break;
    case REDIS_REPLY_ARRAY:
      copy.kind = Reply::Kind::array;
      copy.elements.reserve(reply->elements);
      for (size_t i = 0; i < reply->elements; ++i)
        copy.elements.push_back(copy_reply(reply->element[i]));
      break;
    default:
      copy.kind = Reply::Kind::nil;
  }
  return copy;
}

std::string hex_sha1(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha1(), nullptr);
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kDigits[digest[i] >> 4];
    hex += kDigits[digest[i] & 15];
  }
  return hex;
}

}  // namespace

std::string Endpoint::name() const {
  return socket_path.empty() ? host + ":" + std::to_string(port) : socket_path;
}

Endpoint parse_url(const std::string& url) {
  Endpoint endpoint;
  constexpr std::string_view kUnix = "unix://";
  constexpr std::string_view kTcp = "redis://";
  constexpr std::string_view kTls = "rediss://";
  if (url.rfind(kUnix, 0) == 0) {
    std::string rest = url.substr(kUnix.size());
    if (size_t query = rest.find("?db="); query != std::string::npos) {
      endpoint.database = parse_number(rest.substr(query + 4), "database", url);
      rest.resize(query);
    }
    if (rest.empty() || rest[0] != '/') {
      throw std::invalid_argument("redis URL '" + url +
                                  "': expected unix:///absolute/path/to/socket");
    }
    endpoint.socket_path = rest;
    return endpoint;
  }
  endpoint.tls = url.rfind(kTls, 0) == 0;
  if (url.rfind(kTcp, 0) != 0 && !endpoint.tls) {
    throw std::invalid_argument("redis URL '" + url +
                                "': expected redis://[user:password@]host[:port][/db], the same "
                                "with rediss:// for TLS, or unix:///path/to/socket");
  }
  std::string rest = url.substr(endpoint.tls ? kTls.size() : kTcp.size());
  if (size_t at = rest.rfind('@'); at != std::string::npos) {
    std::string credentials = rest.substr(0, at);
    rest = rest.substr(at + 1);
    size_t colon = credentials.find(':');
    if (colon == std::string::npos) {
      endpoint.password = credentials;  // redis://password@host, as some clients write it
    } else {
      endpoint.user = credentials.substr(0, colon);
      endpoint.password = credentials.substr(colon + 1);
    }
  }
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    std::string database = rest.substr(slash + 1);
    if (!database.empty()) endpoint.database = parse_number(database, "database", url);
    rest.resize(slash);
  }
  if (size_t colon = rest.rfind(':'); colon != std::string::npos && rest.back() != ']') {
    endpoint.port = parse_number(rest.substr(colon + 1), "port", url);
    if (endpoint.port == 0 || endpoint.port > 65535) {
      throw std::invalid_argument("redis URL '" + url + "': port " + std::to_string(endpoint.port) +
                                  " is out of range");
    }
    rest.resize(colon);
  }
  if (rest.size() > 2 && rest.front() == '[' && rest.back() == ']')
    rest = rest.substr(1, rest.size() - 2);
  if (rest.empty()) throw std::invalid_argument("redis URL '" + url + "': no host");
  endpoint.host = rest;
  return endpoint;
}

Script::Script(std::string source) : source_(std::move(source)), sha1_(hex_sha1(source_)) {}

Connection::Connection(const Endpoint& endpoint, const net::TlsClientContext* tls,
                       std::chrono::milliseconds connect_timeout,
                       std::chrono::milliseconds command_timeout)
    : endpoint_name_(endpoint.name()), command_timeout_(command_timeout) {
  auto deadline = Clock::now() + connect_timeout;
  try {
    stream_ = std::make_unique<net::SocketStream>(
        endpoint.socket_path.empty()
            ? net::SocketStream::connect_tcp(endpoint.host, endpoint.port, deadline)
            : net::SocketStream::connect_unix(endpoint.socket_path, deadline));
    if (tls) {
      stream_->start_tls(*tls, endpoint.server_name.empty() ? endpoint.host : endpoint.server_name,
                         deadline);
    }
  } catch (const net::SocketError& error) {
    std::string reason = error.kind() == net::SocketError::Kind::timed_out
                             ? "no answer within " + std::to_string(connect_timeout.count()) + " ms"
                             : error.what();
    throw Error("redis " + endpoint_name_ + ": connect failed: " + reason);
  }
  reader_ = redisReaderCreate();
  if (!reader_) throw Error("redis " + endpoint_name_ + ": connect failed: out of memory");
  try {
    authenticate_and_select(endpoint);
  } catch (...) {
    redisReaderFree(reader_);
    throw;
  }
}

void Connection::authenticate_and_select(const Endpoint& endpoint) {
  if (!endpoint.password.empty()) {
    Command auth = endpoint.user.empty() ? Command{"AUTH", endpoint.password}
                                         : Command{"AUTH", endpoint.user, endpoint.password};
    Reply reply = command(auth);
    if (reply.kind == Reply::Kind::error)
      throw Error("redis " + endpoint_name_ + ": AUTH refused: " + reply.text);
  }
  if (endpoint.database != 0) {
    Reply reply = command({"SELECT", std::to_string(endpoint.database)});
    if (reply.kind == Reply::Kind::error) {
      throw Error("redis " + endpoint_name_ + ": SELECT " + std::to_string(endpoint.database) +
                  " refused: " + reply.text);
    }
  }
}

Connection::~Connection() {
  if (reader_) redisReaderFree(reader_);
}

void Connection::fail(const std::string& what, const std::string& reason) {
  broken_ = true;
  throw Error("redis " + endpoint_name_ + ": " + what + ": " + reason);
}

std::vector<Reply> Connection::pipeline(const std::vector<Command>& commands) {
  if (broken_) throw Error("redis " + endpoint_name_ + ": the connection is broken");
  auto deadline = Clock::now() + command_timeout_;
  std::string request;
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const Command& command : commands) {
    argv.clear();
    lengths.clear();
    for (const std::string& word : command) {
      argv.push_back(word.data());
      lengths.push_back(word.size());
    }
    char* encoded = nullptr;
    int length = redisFormatCommandArgv(&encoded, static_cast<int>(argv.size()), argv.data(),
                                        lengths.data());
    if (length < 0) fail("sending " + command.at(0), "out of memory");
    request.append(encoded, static_cast<size_t>(length));
    redisFreeCommand(encoded);
  }
  auto reason_of = [&](const net::SocketError& error) -> std::string {
    if (error.kind() == net::SocketError::Kind::timed_out)
      return "no reply within " + std::to_string(command_timeout_.count()) + " ms";
    return error.what();
  };
  try {
    stream_->write_all(request, deadline);
  } catch (const net::SocketError& error) {
    fail("sending " + commands.at(0).at(0), reason_of(error));
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  char buffer[16 * 1024];
  for (const Command& command : commands) {
    void* parsed = nullptr;
    while (true) {
      if (redisReaderGetReply(reader_, &parsed) != REDIS_OK)
        fail(command.at(0), std::string("protocol error: ") + reader_->errstr);
      if (parsed) break;
      try {
        size_t got = stream_->read_some(buffer, sizeof buffer, deadline);
        if (redisReaderFeed(reader_, buffer, got) != REDIS_OK)
          fail(command.at(0), std::string("protocol error: ") + reader_->errstr);
      } catch (const net::SocketError& error) {
        fail(command.at(0), reason_of(error));
      }
    }
    replies.push_back(copy_reply(static_cast<redisReply*>(parsed)));
    freeReplyObject(parsed);
  }
  return replies;
}

Reply Connection::command(const Command& command) {
  return std::move(pipeline({command}).front());
}

// Returns the connection to the pool when the caller is done, unless it broke.
class Client::Lease {
 public:
  explicit Lease(Client& client) : client_(client), connection_(client.borrow()) {}
  ~Lease() { client_.give_back(std::move(connection_)); }
  Connection& operator*() { return *connection_; }
  Connection* operator->() { return connection_.get(); }

 private:
  Client& client_;
  std::unique_ptr<Connection> connection_;
};

Client::Client(Endpoint endpoint, ClientOptions options)
    : endpoint_(std::move(endpoint)), options_(std::move(options)) {
  if (options_.pool_size == 0) options_.pool_size = 1;
  if (endpoint_.tls) {
    try {
      tls_.emplace(options_.tls);
    } catch (const net::TlsError& error) {
      throw std::invalid_argument(error.what());
    }
  }
}

Client::~Client() = default;

std::unique_ptr<Connection> Client::borrow() {
  std::unique_lock lock(mutex_);
  auto deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  while (idle_.empty() && open_ >= options_.pool_size) {
    if (returned_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() &&
        open_ >= options_.pool_size) {
      throw Error("redis " + endpoint_.name() + ": all " + std::to_string(options_.pool_size) +
                  " connections stayed busy for " +
                  std::to_string(options_.command_timeout.count()) + " ms (raise pool_size)");
    }
  }
  if (!idle_.empty()) {
    auto connection = std::move(idle_.back());
    idle_.pop_back();
    return connection;
  }
  if (std::chrono::steady_clock::now() < connect_blocked_until_) throw Error(last_connect_error_);
  ++open_;
  lock.unlock();
  try {
    return std::make_unique<Connection>(endpoint_, tls_ ? &*tls_ : nullptr,
                                        options_.connect_timeout, options_.command_timeout);
  } catch (const Error& error) {
    lock.lock();
    --open_;
    connect_blocked_until_ = std::chrono::steady_clock::now() + options_.retry_interval;
    last_connect_error_ = error.what();
    returned_.notify_one();
    throw;
  }
}

void Client::give_back(std::unique_ptr<Connection> connection) {
  std::lock_guard lock(mutex_);
  if (connection && !connection->broken()) {
    idle_.push_back(std::move(connection));
  } else {
    --open_;
  }
  returned_.notify_one();
}

std::vector<Reply> Client::pipeline(const std::vector<Command>& commands) {
  Lease connection(*this);
  return connection->pipeline(commands);
}

Reply Client::command(const Command& command) {
  Reply reply = [&] {
    Lease connection(*this);
    return connection->command(command);
  }();
  return expect_ok(reply, *this, command.at(0));
}

Reply Client::run(const Script& script, const std::vector<std::string>& keys,
                  const std::vector<std::string>& args) {
  Command evalsha = {"EVALSHA", script.sha1(), std::to_string(keys.size())};
  evalsha.insert(evalsha.end(), keys.begin(), keys.end());
  evalsha.insert(evalsha.end(), args.begin(), args.end());
  Lease connection(*this);
  Reply reply = connection->command(evalsha);
  if (reply.kind == Reply::Kind::error && reply.text.rfind("NOSCRIPT", 0) == 0) {
    // Loaded and run in one round trip; the next EVALSHA finds it.
    std::vector<Reply> replies =
        connection->pipeline({{"SCRIPT", "LOAD", script.source()}, evalsha});
    expect_ok(replies[0], *this, "SCRIPT LOAD");
    reply = std::move(replies[1]);
  }
  return expect_ok(reply, *this, "EVALSHA");
}

bool Client::ping(std::string* error) {
  try {
    command({"PING"});
    return true;
  } catch (const Error& failure) {
    if (error) *error = failure.what();
    return false;
  }
}

std::unique_ptr<Connection> Client::connect_dedicated(std::chrono::milliseconds command_timeout) {
  return std::make_unique<Connection>(endpoint_, tls_ ? &*tls_ : nullptr, options_.connect_timeout,
                                      command_timeout);
}

const Reply& expect_ok(const Reply& reply, const Client& client, const std::string& what) {
  if (reply.kind == Reply::Kind::error)
    throw Error("redis " + client.endpoint().name() + ": " + what + " failed: " + reply.text);
  return reply;
}

}  // namespace chatflow::redis
