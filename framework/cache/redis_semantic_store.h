// Semantic-cache entries shared through Redis: each entry (vector, context, question, answer) is a
// key with Redis's expiry, and every insertion and correction is also a message on one Redis
// stream.
// Each replica builds its own vector index from the entries at start and keeps it current by
// following the stream on a thread of its own (XREAD BLOCK, so it stops within a block's time).
// After losing Redis the follower rebuilds the index from the entries once it is back, so it
// never keeps what another replica corrected meanwhile.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "framework/cache/semantic_index.h"

namespace chatflow::redis {
class Client;
class Connection;
}  // namespace chatflow::redis

namespace chatflow::storage {
class FailureLog;
}

namespace chatflow::cache {

struct RedisSemanticOptions {
  std::string key_prefix;  // every key starts with it
  size_t dimensions = 0;
  size_t max_entries = 100000;           // per partition, in each replica's index
  size_t stream_length = 100000;         // messages the stream keeps (approximately)
  std::chrono::milliseconds block{500};  // how long one XREAD waits: bounds the stop
};

class RedisSemanticStore {
 public:
  // Builds the index from Redis before returning when Redis answers (else the follower keeps
  // trying); `failures` hears what the follower could not do.
  RedisSemanticStore(std::shared_ptr<redis::Client> client, RedisSemanticOptions options,
                     std::shared_ptr<storage::FailureLog> failures);
  ~RedisSemanticStore();
  RedisSemanticStore(const RedisSemanticStore&) = delete;
  RedisSemanticStore& operator=(const RedisSemanticStore&) = delete;

  // The index as of the last message followed (replaced whole when rebuilt).
  std::shared_ptr<SemanticIndex> index() const;
  // Whether the follower is in step with Redis (built and following); when not, the cache
  // misses rather than answer from entries another replica may have corrected.
  bool in_step() const { return in_step_.load(); }

  // Into this replica's index at once, then into Redis and the stream; throws redis::Error when
  // Redis fails (the local entry stays). `entry.id` is set here.
  void insert(const std::string& partition, SemanticEntry entry, std::chrono::milliseconds ttl);
  // As SemanticIndex::forget, here, in Redis and (by a stream message) in every replica.
  // Throws redis::Error when Redis fails.
  size_t forget(const std::string& prefix, const std::string& context,
                const std::vector<float>* near, float threshold);

 private:
  void follow(std::unique_ptr<redis::Connection> connection, std::string position);
  void report(const std::string& error);
  std::string rebuild(redis::Connection& connection);
  void apply(const std::vector<std::pair<std::string, std::string>>& fields);
  bool wait_or_stop(std::chrono::milliseconds pause);

  std::shared_ptr<redis::Client> client_;
  RedisSemanticOptions options_;
  std::shared_ptr<storage::FailureLog> failures_;
  std::string stream_key_;
  mutable std::mutex index_mutex_;
  std::shared_ptr<SemanticIndex> index_;
  std::atomic<bool> in_step_{false};
  std::mutex stop_mutex_;
  std::condition_variable stop_changed_;
  bool stopping_ = false;
  std::thread follower_;
};

}  // namespace chatflow::cache
