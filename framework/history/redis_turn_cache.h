// Hot session turns in Redis in front of the durable store, so a session continued on another
// replica sees its turns without each replica reading the durable store on every request.
// Write-through: a turn goes to the durable store first, then (when the session is cached) to
// the end of its Redis list. A load reads Redis; a session Redis does not hold is read from the
// durable store and put there for `ttl` (renewed by every load). Lists, summaries, titles and
// deletions are the durable store's; a deletion also drops the cached turns.
//
// A fill never races an append into a stale list: every append bumps the session's version, and
// a fill only writes when the version is still the one it saw before reading the durable store.
// A write this replica could not make in Redis (Redis unreachable) leaves the session marked
// here, and its cached turns are dropped before this replica uses Redis again.
//
// Retention: cached turns past the TTL are never given back; a load of the newest N turns reads
// only those from Redis; sessions the durable store deletes (one, an owner's, or evicted past an
// owner's limit) are dropped from Redis as they go.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "framework/history/history_store.h"

namespace chatflow::redis {
class Client;
}
namespace chatflow::storage {
class FailureLog;
}

namespace chatflow::history {

class RedisTurnCache final : public HistoryStore {
 public:
  RedisTurnCache(std::unique_ptr<HistoryStore> durable, std::shared_ptr<redis::Client> client,
                 std::string key_prefix, std::chrono::milliseconds ttl,
                 std::shared_ptr<storage::FailureLog> failures, Retention retention = {});
  ~RedisTurnCache() override;

  std::vector<Turn> load(const SessionKey& key) override;
  bool append(const SessionKey& key, Turn turn, bool durable) override;
  std::optional<SessionPage> list(const std::string& tenant, const std::string& owner, size_t limit,
                                  const std::string& after) override;
  std::optional<SessionSummary> summary(const SessionKey& key) override;
  bool remove(const SessionKey& key) override;
  std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) override;
  bool set_active(const SessionKey& key, int64_t active_back) override;
  // Kept responses are not cached: they go to the durable store.
  void keep_response(const SessionKey& key, const KeptResponse& response, int64_t time) override {
    durable_->keep_response(key, response, time);
  }
  std::optional<KeptResponse> kept_response(const SessionKey& key) override {
    return durable_->kept_response(key);
  }
  bool forget_response(const SessionKey& key) override { return durable_->forget_response(key); }
  int64_t lost_turns() const override { return durable_->lost_turns(); }
  int64_t last_failure_time() const override { return durable_->last_failure_time(); }
  std::vector<Turn> load_recent(const SessionKey& key, size_t max_turns) override;
  std::vector<std::string> remove_owner(const std::string& tenant,
                                        const std::string& owner) override;
  SweepOutcome sweep(int64_t now) override;

 private:
  std::string key_of(const SessionKey& key) const;
  // Drops the cached turns of the sessions now (Redis errors only logged).
  void drop(const std::vector<SessionKey>& keys, const std::string& consequence);
  std::vector<Turn> unexpired(std::vector<Turn> turns) const;
  // Drops the cached turns of sessions whose last write missed Redis; throws redis::Error.
  void drop_stale();
  void mark_stale(const SessionKey& key);

  std::unique_ptr<HistoryStore> durable_;
  std::shared_ptr<redis::Client> client_;
  std::string key_prefix_;
  std::chrono::milliseconds ttl_;
  std::shared_ptr<storage::FailureLog> failures_;
  Retention retention_;
  std::mutex stale_mutex_;
  std::set<SessionKey> stale_;
};

// One turn as the JSON the cache keeps, and back (std::runtime_error when damaged).
std::string turn_json(const Turn& turn);
Turn turn_of(const std::string& json);

}  // namespace chatflow::history
