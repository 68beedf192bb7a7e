// Exact-cache entries in Redis, shared by replicas: each answer under its key with Redis's own
// expiry (PX), and per conversation the set of keys answering it, so an admin's correction finds
// every entry of the conversation whichever replica wrote it. Every call throws redis::Error
// when Redis fails; the cache then misses.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "framework/cache/cached_answer.h"

namespace chatflow::redis {
class Client;
}

namespace chatflow::cache {

class RedisExactStore {
 public:
  // Keys start with `key_prefix`.
  RedisExactStore(std::shared_ptr<redis::Client> client, std::string key_prefix);

  // The answer stored under `key` for `tenant`; null when there is none (or it is damaged).
  std::shared_ptr<const CachedAnswer> get(const std::string& tenant, const std::string& key);
  // Keeps `answer` (its tenant and conversation set) for `ttl`.
  void put(const std::string& key, const CachedAnswer& answer, std::chrono::milliseconds ttl);
  // Removes the entries of the conversation digest `conversation` (of `model` only, unless
  // empty); returns how many.
  size_t forget_conversation(const std::string& conversation, const std::string& model);
  // Removes every entry of `tenant`; returns how many.
  size_t forget_tenant(const std::string& tenant);

 private:
  std::string entry_key(const std::string& tenant, const std::string& key) const;

  std::shared_ptr<redis::Client> client_;
  std::string key_prefix_;
};

// `text` with Redis's glob characters escaped, for a SCAN MATCH pattern.
std::string escape_glob(const std::string& text);

}  // namespace chatflow::cache
