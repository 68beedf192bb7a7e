#include "framework/cache/redis_exact_store.h"

#include "framework/cache/answer_codec.h"
#include "framework/security/crypto.h"
#include "framework/storage/redis_client.h"

namespace chatflow::cache {

std::string escape_glob(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return escaped;
}

RedisExactStore::RedisExactStore(std::shared_ptr<redis::Client> client, std::string key_prefix)
    : client_(std::move(client)), key_prefix_(std::move(key_prefix)) {}

// The tenant's digest in every key, so forgetting a tenant is one SCAN pattern.
std::string RedisExactStore::entry_key(const std::string& tenant, const std::string& key) const {
  return key_prefix_ + "entry:" + security::sha256_hex(tenant).substr(0, 32) + ":" + key;
}

std::shared_ptr<const CachedAnswer> RedisExactStore::get(const std::string& tenant,
                                                         const std::string& key) {
  redis::Reply reply = client_->command({"GET", entry_key(tenant, key)});
  if (reply.kind != redis::Reply::Kind::string) return nullptr;
  try {
    // Redis enforces the expiry; the local one only has to lie ahead.
    auto answer = decode_answer(reply.text, std::chrono::steady_clock::time_point::max());
    if (answer->tenant != tenant) return nullptr;
    return answer;
  } catch (const std::runtime_error&) {
    return nullptr;  // written by another version, or damaged: a miss
  }
}

void RedisExactStore::put(const std::string& key, const CachedAnswer& answer,
                          std::chrono::milliseconds ttl) {
  std::string entry = entry_key(answer.tenant, key);
  std::string conversation = key_prefix_ + "conversation:" + answer.conversation;
  std::string milliseconds = std::to_string(std::max<int64_t>(1, ttl.count()));
  for (const auto& reply :
       client_->pipeline({{"SET", entry, encode_answer(answer), "PX", milliseconds},
                          {"SADD", conversation, entry},
                          {"PEXPIRE", conversation, milliseconds}}))
    redis::expect_ok(reply, *client_, "storing an exact-cache entry");
}

size_t RedisExactStore::forget_conversation(const std::string& conversation,
                                            const std::string& model) {
  std::string set = key_prefix_ + "conversation:" + conversation;
  redis::Reply members = client_->command({"SMEMBERS", set});
  size_t removed = 0;
  for (const auto& member : members.elements) {
    if (!model.empty()) {
      redis::Reply value = client_->command({"GET", member.text});
      if (value.kind != redis::Reply::Kind::string) continue;
      try {
        if (decode_answer(value.text, {})->model != model) continue;
      } catch (const std::runtime_error&) {
        // damaged: removed with the rest
      }
    }
    removed += static_cast<size_t>(client_->command({"DEL", member.text}).integer);
    client_->command({"SREM", set, member.text});
  }
  return removed;
}

size_t RedisExactStore::forget_tenant(const std::string& tenant) {
  std::string pattern =
      escape_glob(key_prefix_ + "entry:" + security::sha256_hex(tenant).substr(0, 32) + ":") + "*";
  std::string cursor = "0";
  size_t removed = 0;
  do {
    redis::Reply page = client_->command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (page.elements.size() != 2) break;
    cursor = page.elements[0].text;
    redis::Command del = {"DEL"};
    for (const auto& key : page.elements[1].elements)
      del.push_back(key.text);
    if (del.size() > 1) removed += static_cast<size_t>(client_->command(del).integer);
  } while (cursor != "0");
  return removed;
}

}  // namespace chatflow::cache
