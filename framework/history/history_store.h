// Conversation turns kept on the server, by tenant, owner (a user, or a key without one) and
// session: SQLite (a file, WAL, one writer thread that commits in batches), memory (tests) or
// PostgreSQL (postgres_history_store.h), optionally behind Redis (redis_turn_cache.h). A turn is
// one user message and the answer to it, with how it ended; only completed turns are given back
// as context. Another owner's session of the same id is another session: one caller can neither
// read nor extend another's conversation.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "framework/history/kept_responses.h"

struct sqlite3;

namespace chatflow::history {

enum class TurnStatus { completed, cancelled, filtered, failed };
std::string_view to_string(TurnStatus status);

struct Turn {
  std::string user;
  std::string assistant;
  TurnStatus status = TurnStatus::completed;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t time = 0;  // Unix seconds
  // Where the turn sits in its session's tree (turn_tree.h), as distances back in the session's
  // order: its parent (0: none, a first message; 1, the default: the turn before it, as every
  // turn was before branches) and the turn whose question it answers again (0: its own, in
  // `user`; else `user` is empty and no text is stored twice).
  int64_t parent_back = 1;
  int64_t question_back = 0;
  // Read from the session's newest turn only: how far back from it is the turn the session
  // shows (0: the newest). A new turn is shown: it is written with 0.
  int64_t active_back = 0;
  // How many turns the session had when place_turn placed this one (-1: not placed; not kept).
  // A store other processes write too (PostgreSQL, a fleet) moves parent_back and question_back
  // past the turns they appended since, so concurrent turns keep the parents they were given.
  int64_t placed_among = -1;
};

// Whose session: Identity::owner() names the owner.
struct SessionKey {
  std::string tenant;
  std::string owner;
  std::string session;

  auto operator<=>(const SessionKey&) const = default;
};

// What a list of sessions shows of one.
struct SessionSummary {
  std::string session;
  std::string title;       // the owner's title, else the first user message cut short
  int64_t created_at = 0;  // the first turn's time (Unix seconds)
  int64_t updated_at = 0;  // the last turn's
  int64_t turns = 0;       // all statuses
};

struct SessionPage {
  std::vector<SessionSummary> sessions;
  bool has_more = false;  // more sessions follow the last one
};

// How long turns are kept and how many sessions an owner keeps (the history_store resource's
// `retention`). Every store hides expired turns from reads at once, applies both limits when a
// session starts (a first turn, or one after the session's turns all expired), and removes what
// has gone in sweep().
struct Retention {
  int64_t ttl_days = 0;                // a turn is kept this long after it was written; 0: forever
  int64_t max_sessions_per_owner = 0;  // 0: unlimited; more evicts the least recently active
  // Kept responses (kept_responses.h) an owner keeps: keeping one more removes the oldest (by
  // when each was kept, to the second); 0: unlimited.
  int64_t max_responses_per_owner = 1000;
  // Turns written before this (Unix seconds) have expired at `now`; INT64_MIN when none do.
  int64_t expired_before(int64_t now) const {
    return ttl_days > 0 ? now - ttl_days * kSecondsPerDay : INT64_MIN;
  }
  bool limits_anything() const { return ttl_days > 0 || max_sessions_per_owner > 0; }
  static constexpr int64_t kSecondsPerDay = 86400;
};

struct SweepOutcome {
  int64_t expired_turns = 0;     // turns past ttl_days
  int64_t evicted_sessions = 0;  // sessions past an owner's max_sessions_per_owner
};

using EvictionListener = std::function<void(const std::vector<SessionKey>& evicted)>;

class HistoryStore {
 public:
  virtual ~HistoryStore() = default;
  // Every turn of the session, oldest first (all statuses).
  virtual std::vector<Turn> load(const SessionKey& key) = 0;
  // Records a turn. With `durable`, returns only once it is committed (it then survives a crash
  // of the process), false when the write failed; otherwise queues it and returns true, and a
  // failed write is only counted (lost_turns) and logged.
  virtual bool append(const SessionKey& key, Turn turn, bool durable) = 0;

  // The sessions `owner` keeps in `tenant`, the one with the latest turn first: at most `limit`,
  // those after the session `after` in that order (empty: from the first). nullopt when `after`
  // names no session of the owner. Sees committed turns (a durable append's at once).
  virtual std::optional<SessionPage> list(const std::string& tenant, const std::string& owner,
                                          size_t limit, const std::string& after) = 0;
  // One session's summary; nullopt when it has no turn.
  virtual std::optional<SessionSummary> summary(const SessionKey& key) = 0;
  // Deletes the session's turns and title for good (a later append starts a new session);
  // false when it had no turn. Returns once committed; throws std::runtime_error when the
  // store could not write.
  virtual bool remove(const SessionKey& key) = 0;
  // Gives the session a title that replaces the one made from its first message; nullopt when
  // it has no turn. Returns once committed; throws std::runtime_error when the store could not
  // write.
  virtual std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) = 0;
  // Shows the turn `active_back` turns back from the session's newest (sets the newest turn's
  // active_back); false when the session has no turn. Returns once committed; throws
  // std::runtime_error when the store could not write.
  virtual bool set_active(const SessionKey& key, int64_t active_back) {
    (void)key;
    (void)active_back;
    throw std::runtime_error("this history store cannot switch a session's branch");
  }
  // The Responses API's kept responses (kept_responses.h), keyed as sessions are with the
  // response's id as `session`; `time` (Unix seconds) is when it was kept, for ttl_days. Each
  // returns once committed and throws std::runtime_error when the store could not write or read.
  virtual void keep_response(const SessionKey& key, const KeptResponse& response, int64_t time) {
    (void)key;
    (void)response;
    (void)time;
    throw std::runtime_error("this history store cannot keep responses");
  }
  virtual std::optional<KeptResponse> kept_response(const SessionKey& key) {
    (void)key;
    return std::nullopt;
  }
  virtual bool forget_response(const SessionKey& key) {
    (void)key;
    return false;
  }
  // Turns that could not be written since the store opened, and when the last such failure was
  // (Unix seconds, 0 if never).
  virtual int64_t lost_turns() const { return 0; }
  virtual int64_t last_failure_time() const { return 0; }

  // The newest `max_turns` turns of the session (0: all), oldest first: what a request loads.
  virtual std::vector<Turn> load_recent(const SessionKey& key, size_t max_turns) = 0;
  // Deletes every session `owner` keeps in `tenant` for good, and the owner's kept responses;
  // returns the sessions' ids. Returns once
  // committed; throws std::runtime_error when the store could not write.
  virtual std::vector<std::string> remove_owner(const std::string& tenant,
                                                const std::string& owner) = 0;
  // Removes what retention says has gone at `now` (Unix seconds): expired turns, the titles of
  // sessions left without a turn, sessions past an owner's limit (a limit lowered since they were
  // written). Throws std::runtime_error when the store could not write.
  virtual SweepOutcome sweep(int64_t now) = 0;
  // Told of the sessions the store evicts on its own (max_sessions_per_owner), once that is
  // committed, on the thread that evicted them. Set before the store is used.
  virtual void on_evicted(EvictionListener listener) { evicted_listener_ = std::move(listener); }

 protected:
  void evicted(const std::vector<SessionKey>& keys) const {
    if (!keys.empty() && evicted_listener_) evicted_listener_(keys);
  }

 private:
  EvictionListener evicted_listener_;
};

// How the SQLite store's sweep goes about it.
struct SqliteSweepOptions {
  // Expired turns are deleted this many at a time, each chunk in a transaction of its own with
  // the database free between chunks: the first sweep of a large file (ttl_days just set) holds
  // up reads and writes for one chunk at a time, not for all of it.
  int64_t chunk_turns = 5'000;
  // Called between two chunks with nothing locked (tests).
  std::function<void()> between_chunks;
};

std::unique_ptr<HistoryStore> make_memory_store(Retention retention = {});
// Throws std::runtime_error when the file cannot be opened or set up.
std::unique_ptr<HistoryStore> make_sqlite_store(const std::string& path, Retention retention = {},
                                                SqliteSweepOptions sweep = {});

}  // namespace chatflow::history
