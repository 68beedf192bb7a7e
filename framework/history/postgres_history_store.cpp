#include "framework/history/postgres_history_store.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>

#include "framework/history/session_title.h"
#include "framework/storage/batch_writer.h"

namespace chatflow::history {
namespace {

using postgres::Connection;
using postgres::Param;
using postgres::PostgresError;

// The first key of the per-owner advisory locks taken when a session starts (the second is a
// hash of the tenant and owner): apart from the ledger's per-tenant locks.
constexpr int64_t kOwnerLockSpace = 0x68697374;  // "hist"
// Expired turns are deleted this many at a time: no statement runs into statement_timeout.
constexpr int64_t kSweepChunk = 10'000;

const std::vector<postgres::Migration>& history_migrations() {
  static const std::vector<postgres::Migration> all = {
      {1,
       "session turns and titles",
       {"CREATE TABLE history_turns ("
        "  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        "  tenant BYTEA NOT NULL, owner BYTEA NOT NULL, session BYTEA NOT NULL,"
        "  time BIGINT NOT NULL,"
        "  user_content BYTEA NOT NULL, assistant_content BYTEA NOT NULL, status TEXT NOT NULL,"
        "  prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL)",
        "CREATE INDEX history_turns_session ON history_turns (tenant, owner, session, id)",
        "CREATE TABLE history_titles ("
        "  tenant BYTEA NOT NULL, owner BYTEA NOT NULL, session BYTEA NOT NULL,"
        "  title BYTEA NOT NULL, PRIMARY KEY (tenant, owner, session))"}},
      {2,
       "turn times for the retention sweep",
       {"CREATE INDEX history_turns_time ON history_turns (time)"}},
      // Before branches each turn followed the one before it: the defaults keep those sessions
      // the chains they were (turn_tree.h).
      {3,
       "branches: each turn's parent and question, the session's shown turn",
       {"ALTER TABLE history_turns ADD COLUMN parent_back BIGINT NOT NULL DEFAULT 1",
        "ALTER TABLE history_turns ADD COLUMN question_back BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE history_turns ADD COLUMN active_back BIGINT NOT NULL DEFAULT 0"}},
      {4,
       "the Responses API's kept responses",
       {"CREATE TABLE history_responses ("
        "  tenant BYTEA NOT NULL, owner BYTEA NOT NULL, id BYTEA NOT NULL, time BIGINT NOT NULL,"
        "  response BYTEA NOT NULL, conversation BYTEA NOT NULL, PRIMARY KEY (tenant, owner, id))",
        "CREATE INDEX history_responses_time ON history_responses (time)"}},
  };
  return all;
}

int64_t unix_now() {
  return static_cast<int64_t>(std::time(nullptr));
}

TurnStatus status_from(std::string_view text) {
  if (text == "completed") return TurnStatus::completed;
  if (text == "cancelled") return TurnStatus::cancelled;
  if (text == "filtered") return TurnStatus::filtered;
  return TurnStatus::failed;
}

// The sessions of (tenant $1, owner $2) with a turn written at or after $<cutoff> (the TTL's),
// one row each: session, first user message, title (or empty), created, updated, turns.
// `sessions.last` is the session's highest turn id: unlike times in seconds no two sessions
// share it, so a page ends where the next begins. `filter` narrows the sessions (", AND session =
// $3").
std::string summary_select(int cutoff, std::string_view filter = {}) {
  std::string sql =
      "SELECT sessions.session, first.user_content, COALESCE(titles.title, ''::bytea), "
      "sessions.created, sessions.updated, sessions.turns FROM (SELECT session, MIN(id) AS "
      "first_id, MAX(id) AS last, MIN(time) AS created, MAX(time) AS updated, COUNT(*) AS turns "
      "FROM history_turns WHERE tenant = $1 AND owner = $2 AND time >= $" +
      std::to_string(cutoff) + " ";
  sql += filter;
  sql +=
      " GROUP BY session) AS sessions JOIN history_turns AS first ON first.id = sessions.first_id "
      "LEFT JOIN history_titles AS titles ON titles.tenant = $1 AND titles.owner = $2 AND "
      "titles.session = sessions.session ";
  return sql;
}

SessionSummary summary_row(const postgres::Result& rows, int row) {
  std::string title = rows.bytes(row, 2);
  return {rows.bytes(row, 0), title.empty() ? title_from_message(rows.bytes(row, 1)) : title,
          rows.integer(row, 3), rows.integer(row, 4), rows.integer(row, 5)};
}

std::vector<Param> key_params(const SessionKey& key) {
  return {Param::bytes(key.tenant), Param::bytes(key.owner), Param::bytes(key.session)};
}

// FNV-1a of the tenant and owner, as the advisory lock's second key: the same on every replica.
int64_t owner_lock_key(const std::string& tenant, const std::string& owner) {
  uint32_t hash = 2166136261u;
  auto mix = [&](std::string_view bytes) {
    for (unsigned char byte : bytes) {
      hash ^= byte;
      hash *= 16777619u;
    }
  };
  mix(tenant);
  mix(std::string_view("\0", 1));
  mix(owner);
  return static_cast<int32_t>(hash);
}

void lock_owner(Connection& connection, const SessionKey& key) {
  connection.exec(
      "SELECT pg_advisory_xact_lock($1::integer, $2::integer)",
      {Param::integer(kOwnerLockSpace), Param::integer(owner_lock_key(key.tenant, key.owner))},
      "locking the owner's sessions");
}

void insert_turn(Connection& connection, const SessionKey& key, const Turn& turn) {
  std::vector<Param> params = key_params(key);
  params.push_back(Param::integer(turn.time));
  params.push_back(Param::bytes(turn.user));
  params.push_back(Param::bytes(turn.assistant));
  params.push_back(Param::text(to_string(turn.status)));
  params.push_back(Param::integer(turn.prompt_tokens));
  params.push_back(Param::integer(turn.completion_tokens));
  params.push_back(Param::integer(turn.parent_back));
  params.push_back(Param::integer(turn.question_back));
  params.push_back(Param::integer(turn.active_back));
  connection.exec(
      "INSERT INTO history_turns (tenant, owner, session, time, user_content, assistant_content, "
      "status, prompt_tokens, completion_tokens, parent_back, question_back, active_back) VALUES "
      "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
      params, "saving a session turn");
}

// Deletes the owner's least recently active sessions past `limit`; returns them.
std::vector<SessionKey> evict_past_limit(Connection& connection, const SessionKey& owner,
                                         int64_t limit) {
  postgres::Result gone = connection.exec(
      "WITH past AS (SELECT session FROM history_turns WHERE tenant = $1 AND owner = $2 GROUP BY "
      "session ORDER BY MAX(id) DESC OFFSET $3), titles AS (DELETE FROM history_titles AS title "
      "USING past WHERE title.tenant = $1 AND title.owner = $2 AND title.session = past.session), "
      "turns AS (DELETE FROM history_turns AS turn USING past WHERE turn.tenant = $1 AND "
      "turn.owner = $2 AND turn.session = past.session RETURNING turn.session) SELECT DISTINCT "
      "session FROM turns",
      {Param::bytes(owner.tenant), Param::bytes(owner.owner), Param::integer(limit)},
      "evicting the owner's oldest sessions");
  std::vector<SessionKey> keys;
  for (int row = 0; row < gone.rows(); ++row)
    keys.push_back({owner.tenant, owner.owner, gone.bytes(row, 0)});
  return keys;
}

struct Pending {
  SessionKey key;
  Turn turn;
  uint64_t sequence = 0;  // the order turns were queued in, for the deletions made meanwhile
};

// Whether a transaction that failed this way surely did not commit and is worth running again:
// the server could not be reached. Turns are not unique by anything the server could check: a
// batch whose COMMIT was lost is not written again (it may be there).
bool worth_trying_again(const std::exception& error) {
  auto* failure = dynamic_cast<const PostgresError*>(&error);
  return failure && failure->connection_failed() && !failure->commit_unknown();
}

class PostgresStore final : public HistoryStore {
 public:
  PostgresStore(std::shared_ptr<postgres::Client> client, Retention retention,
                size_t write_buffer_rows)
      : client_(std::move(client)), retention_(retention) {
    client_->migrate("history", history_migrations());
    storage::BatchWriterOptions writing;
    writing.max_buffered = write_buffer_rows;
    writing.is_transient = worth_trying_again;
    writer_ = std::make_unique<storage::BatchWriter<Pending>>(
        "history " + client_->server(),
        [this](const std::deque<Pending>& batch) { write_batch(batch); }, std::move(writing));
  }

  ~PostgresStore() override { writer_.reset(); }  // writes what is queued

  std::vector<Turn> load(const SessionKey& key) override { return load_recent(key, 0); }

  std::vector<Turn> load_recent(const SessionKey& key, size_t max_turns) override {
    // A turn of the session still queued is written first (a failed or cancelled answer: rare),
    // so that what the server holds is the whole session, once.
    write_queued_turns_of(key);
    std::vector<Param> params = key_params(key);
    params.push_back(Param::integer(retention_.expired_before(unix_now())));
    params.push_back(max_turns == 0 ? Param::null()
                                    : Param::integer(static_cast<int64_t>(max_turns)));
    postgres::Result rows = client_->exec(
        "SELECT user_content, assistant_content, status, prompt_tokens, completion_tokens, time, "
        "parent_back, question_back, active_back FROM (SELECT * FROM history_turns WHERE tenant = "
        "$1 AND owner = $2 AND session = $3 AND "
        "time >= $4 ORDER BY id DESC LIMIT $5) AS recent ORDER BY id",
        params, "loading a session");
    std::vector<Turn> turns;
    for (int row = 0; row < rows.rows(); ++row) {
      Turn turn;
      turn.user = rows.bytes(row, 0);
      turn.assistant = rows.bytes(row, 1);
      turn.status = status_from(rows.text(row, 2));
      turn.prompt_tokens = rows.integer(row, 3);
      turn.completion_tokens = rows.integer(row, 4);
      turn.time = rows.integer(row, 5);
      turn.parent_back = rows.integer(row, 6);
      turn.question_back = rows.integer(row, 7);
      turn.active_back = rows.integer(row, 8);
      turns.push_back(std::move(turn));
    }
    return turns;
  }

  bool append(const SessionKey& key, Turn turn, bool durable) override {
    if (turn.time == 0) turn.time = unix_now();
    if (!durable) {
      uint64_t sequence = 0;
      {
        std::lock_guard lock(mutex_);
        sequence = next_sequence_++;
      }
      writer_->push({key, std::move(turn), sequence});
      return true;
    }
    // A queued turn of the same session goes first, so the session keeps its order; one that
    // cannot be written now (the server does not answer) cannot be overtaken either.
    if (!write_queued_turns_of(key)) {
      count_lost(
          "an earlier turn of the session waits for the server to answer, and a turn cannot be "
          "written before it");
      return false;
    }
    std::vector<SessionKey> evicted_keys;
    try {
      // Committed when transaction() returns; run again if the connection broke before COMMIT.
      client_->transaction(
          [&](Connection& connection) { evicted_keys = write_turn(connection, key, turn); });
    } catch (const PostgresError& error) {
      count_lost(error.what());
      return false;
    }
    evicted(evicted_keys);
    return true;
  }

  std::optional<SessionPage> list(const std::string& tenant, const std::string& owner, size_t limit,
                                  const std::string& after) override {
    int64_t cutoff = retention_.expired_before(unix_now());
    int64_t before = INT64_MAX;
    if (!after.empty()) {
      postgres::Result cursor = client_->exec(
          "SELECT MAX(id) FROM history_turns WHERE tenant = $1 AND owner = $2 AND session = $3 "
          "AND time >= $4",
          {Param::bytes(tenant), Param::bytes(owner), Param::bytes(after), Param::integer(cutoff)},
          "finding the session a page starts after");
      if (cursor.is_null(0, 0)) return std::nullopt;
      before = cursor.integer(0, 0);
    }
    std::string sql = summary_select(5);
    sql += "WHERE sessions.last < $3 ORDER BY sessions.last DESC LIMIT $4";
    postgres::Result rows =
        client_->exec(sql,
                      {Param::bytes(tenant), Param::bytes(owner), Param::integer(before),
                       Param::integer(static_cast<int64_t>(std::min<size_t>(limit, INT32_MAX)) + 1),
                       Param::integer(cutoff)},
                      "listing sessions");
    SessionPage page;
    for (int row = 0; row < rows.rows(); ++row) {
      if (page.sessions.size() == limit) {
        page.has_more = true;
        break;
      }
      page.sessions.push_back(summary_row(rows, row));
    }
    return page;
  }

  std::optional<SessionSummary> summary(const SessionKey& key) override {
    std::vector<Param> params = key_params(key);
    params.push_back(Param::integer(retention_.expired_before(unix_now())));
    postgres::Result rows =
        client_->exec(summary_select(4, "AND session = $3"), params, "reading a session's summary");
    if (rows.rows() == 0) return std::nullopt;
    return summary_row(rows, 0);
  }

  bool remove(const SessionKey& key) override {
    // A queued turn of the session must not come back after the deletion: one still queued is
    // taken out; one in the batch being written is left out of it (below).
    auto of_session = [&](const Pending& pending) { return pending.key == key; };
    bool had_queued_turns = writer_->discard_queued(of_session) > 0;
    std::lock_guard order(write_order_mutex_);
    bool had_turns = false;
    try {
      had_turns = client_->transaction([&](Connection& connection) {
        int64_t removed =
            connection
                .exec("DELETE FROM history_turns WHERE tenant = $1 AND owner = $2 AND session = $3",
                      key_params(key), "deleting a session's turns")
                .changed_rows();
        connection.exec(
            "DELETE FROM history_titles WHERE tenant = $1 AND owner = $2 AND session = $3",
            key_params(key), "deleting a session's title");
        return removed > 0;
      });
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the session was not deleted");
    }
    if (writer_->any_pending(of_session)) {
      std::lock_guard lock(mutex_);
      removed_sessions_[key] = next_sequence_;
      had_queued_turns = true;
    }
    return had_turns || had_queued_turns;
  }

  bool set_active(const SessionKey& key, int64_t active_back) override {
    write_queued_turns_of(key);
    std::vector<Param> params = key_params(key);
    params.push_back(Param::integer(active_back));
    try {
      return client_
                 ->exec(
                     "UPDATE history_turns SET active_back = $4 WHERE id = (SELECT MAX(id) FROM "
                     "history_turns WHERE tenant = $1 AND owner = $2 AND session = $3)",
                     params, "switching a session's branch")
                 .changed_rows() > 0;
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the branch was not switched");
    }
  }

  std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) override {
    write_queued_turns_of(key);
    std::vector<Param> params = key_params(key);
    params.push_back(Param::integer(retention_.expired_before(unix_now())));
    params.push_back(Param::bytes(title));
    int64_t changed = 0;
    try {
      // Only a session with turns gets a title: one that does not exist stays so.
      changed = client_
                    ->exec(
                        "INSERT INTO history_titles (tenant, owner, session, title) SELECT $1, "
                        "$2, $3, $5 WHERE EXISTS (SELECT 1 FROM history_turns WHERE tenant = "
                        "$1 AND owner = $2 AND session = $3 AND time >= $4) ON CONFLICT (tenant, "
                        "owner, session) DO UPDATE SET title = EXCLUDED.title",
                        params, "saving a session's title")
                    .changed_rows();
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the title was not saved");
    }
    if (changed == 0) return std::nullopt;
    return summary(key);
  }

  std::vector<std::string> remove_owner(const std::string& tenant,
                                        const std::string& owner) override {
    auto of_owner = [&](const Pending& pending) {
      return pending.key.tenant == tenant && pending.key.owner == owner;
    };
    writer_->discard_queued(of_owner);
    std::lock_guard order(write_order_mutex_);
    std::vector<std::string> sessions;
    try {
      sessions = client_->transaction([&](Connection& connection) {
        postgres::Result removed = connection.exec(
            "WITH deleted AS (DELETE FROM history_turns WHERE tenant = $1 AND owner = $2 "
            "RETURNING session, time) SELECT DISTINCT session FROM deleted WHERE time >= $3",
            {Param::bytes(tenant), Param::bytes(owner),
             Param::integer(retention_.expired_before(unix_now()))},
            "deleting the owner's sessions");
        connection.exec("DELETE FROM history_titles WHERE tenant = $1 AND owner = $2",
                        {Param::bytes(tenant), Param::bytes(owner)}, "deleting the owner's titles");
        connection.exec("DELETE FROM history_responses WHERE tenant = $1 AND owner = $2",
                        {Param::bytes(tenant), Param::bytes(owner)},
                        "deleting the owner's kept responses");
        std::vector<std::string> removed_sessions;
        for (int row = 0; row < removed.rows(); ++row)
          removed_sessions.push_back(removed.bytes(row, 0));
        return removed_sessions;
      });
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the sessions were not deleted");
    }
    if (writer_->any_pending(of_owner)) {
      std::lock_guard lock(mutex_);
      removed_owners_[{tenant, owner}] = next_sequence_;
    }
    return sessions;
  }

  void keep_response(const SessionKey& key, const KeptResponse& response, int64_t time) override {
    std::vector<Param> params = key_params(key);
    params.push_back(Param::integer(time));
    params.push_back(Param::bytes(response.response_json));
    params.push_back(Param::bytes(response.conversation_json));
    try {
      client_->exec(
          "INSERT INTO history_responses (tenant, owner, id, time, response, conversation) VALUES "
          "($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, owner, id) DO UPDATE SET time = "
          "EXCLUDED.time, response = EXCLUDED.response, conversation = EXCLUDED.conversation",
          params, "keeping a response");
      // The owner's oldest past the limit, never the one just kept.
      if (retention_.max_responses_per_owner > 0) {
        std::vector<Param> past = key_params(key);
        past.push_back(Param::integer(retention_.max_responses_per_owner - 1));
        client_->exec(
            "DELETE FROM history_responses WHERE tenant = $1 AND owner = $2 AND id IN (SELECT id "
            "FROM history_responses WHERE tenant = $1 AND owner = $2 AND id <> $3 ORDER BY time "
            "DESC, id DESC OFFSET $4)",
            past, "removing the owner's oldest kept responses");
      }
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the response was not kept");
    }
  }

  std::optional<KeptResponse> kept_response(const SessionKey& key) override {
    std::vector<Param> params = key_params(key);
    params.push_back(Param::integer(retention_.expired_before(unix_now())));
    try {
      postgres::Result rows = client_->exec(
          "SELECT response, conversation FROM history_responses WHERE tenant = $1 AND owner = $2 "
          "AND id = $3 AND time >= $4",
          params, "reading a kept response");
      if (rows.rows() == 0) return std::nullopt;
      return KeptResponse{rows.bytes(0, 0), rows.bytes(0, 1)};
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the response was not read");
    }
  }

  bool forget_response(const SessionKey& key) override {
    try {
      return client_
                 ->exec(
                     "DELETE FROM history_responses WHERE tenant = $1 AND owner = $2 AND id = $3",
                     key_params(key), "deleting a kept response")
                 .changed_rows() > 0;
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the response was not deleted");
    }
  }

  SweepOutcome sweep(int64_t now) override {
    SweepOutcome outcome;
    try {
      if (retention_.ttl_days > 0) {
        outcome.expired_turns = delete_expired(now);
        client_->exec("DELETE FROM history_responses WHERE time < $1",
                      {Param::integer(retention_.expired_before(now))},
                      "deleting expired responses");
      }
      client_->exec(
          "DELETE FROM history_titles AS title WHERE NOT EXISTS (SELECT 1 FROM history_turns AS "
          "turn WHERE turn.tenant = title.tenant AND turn.owner = title.owner AND turn.session = "
          "title.session)",
          {}, "deleting the titles of expired sessions");
      if (retention_.max_sessions_per_owner > 0) outcome.evicted_sessions = evict_crowded_owners();
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the retention sweep stopped");
    }
    return outcome;
  }

  int64_t lost_turns() const override {
    std::lock_guard lock(mutex_);
    return lost_ + writer_->lost();
  }
  int64_t last_failure_time() const override {
    std::lock_guard lock(mutex_);
    return std::max(last_failure_time_, writer_->last_failure_time());
  }

 private:
  // Waits for the queued turns of the session to be written; while the server could not be
  // reached, they are tried once more at once. False when they still wait.
  bool write_queued_turns_of(const SessionKey& key) {
    if (!writer_->any_pending([&](const Pending& pending) { return pending.key == key; }))
      return true;
    return writer_->flush_trying_now();
  }

  // One turn inside a transaction. One that starts a session (its first, or the first after all
  // its turns expired) first clears what the owner left expired, then evicts past the owner's
  // limit, under the owner's lock; returns the sessions evicted.
  std::vector<SessionKey> write_turn(Connection& connection, const SessionKey& key,
                                     const Turn& placed) {
    Turn turn = placed_now(connection, key, placed);
    if (!retention_.limits_anything()) {
      insert_turn(connection, key, turn);
      return {};
    }
    int64_t cutoff = retention_.expired_before(unix_now());
    postgres::Result last = connection.exec(
        "SELECT time FROM history_turns WHERE tenant = $1 AND owner = $2 AND session = $3 ORDER "
        "BY id DESC LIMIT 1",
        key_params(key), "reading the session's last turn");
    bool starts = last.rows() == 0 || last.integer(0, 0) < cutoff;
    if (!starts) {
      insert_turn(connection, key, turn);
      return {};
    }
    // Until COMMIT: another replica starting a session of the owner counts this one.
    lock_owner(connection, key);
    if (retention_.ttl_days > 0) {
      connection.exec("DELETE FROM history_turns WHERE tenant = $1 AND owner = $2 AND time < $3",
                      {Param::bytes(key.tenant), Param::bytes(key.owner), Param::integer(cutoff)},
                      "deleting the owner's expired turns");
    }
    connection.exec(
        "DELETE FROM history_titles AS title WHERE tenant = $1 AND owner = $2 AND NOT EXISTS "
        "(SELECT 1 FROM history_turns AS turn WHERE turn.tenant = $1 AND turn.owner = $2 AND "
        "turn.session = title.session)",
        {Param::bytes(key.tenant), Param::bytes(key.owner)},
        "deleting the titles of the owner's expired sessions");
    insert_turn(connection, key, turn);
    if (retention_.max_sessions_per_owner <= 0) return {};
    return evict_past_limit(connection, key, retention_.max_sessions_per_owner);
  }

  // `turn` as it goes among the session's turns now. Other replicas may have appended to the
  // session since it was placed among `placed_among` turns: its parent and question keep their
  // places (turns are only appended; retention takes the oldest), so its distances back to them
  // grow by as many. Under the owner's lock until COMMIT, so that no replica appends in between.
  Turn placed_now(Connection& connection, const SessionKey& key, const Turn& placed) {
    Turn turn = placed;
    if (turn.placed_among < 0) return turn;
    lock_owner(connection, key);
    std::vector<Param> params = key_params(key);
    params.push_back(Param::integer(retention_.expired_before(unix_now())));
    int64_t appended =
        connection
            .exec(
                "SELECT count(*) FROM history_turns WHERE tenant = $1 AND owner = $2 AND "
                "session = $3 AND time >= $4",
                params, "counting the session's turns")
            .integer(0, 0) -
        turn.placed_among;
    if (appended > 0) {
      if (turn.parent_back > 0) turn.parent_back += appended;
      if (turn.question_back > 0) turn.question_back += appended;
    }
    return turn;
  }

  // The writer's batch of queued turns, in one transaction, less those of sessions deleted
  // since they were queued. A batch is tried again while the server cannot be reached, and a
  // deletion can commit in between: the order lock makes each try see every deletion that
  // committed before it, and none commit during it.
  void write_batch(const std::deque<Pending>& batch) {
    std::unique_lock order(write_order_mutex_);
    std::vector<const Pending*> kept = still_wanted(batch);
    std::vector<SessionKey> evicted_keys;
    try {
      if (!kept.empty()) {
        client_->transaction([&](Connection& connection) {
          evicted_keys.clear();  // a transaction run again starts over
          for (const Pending* pending : kept) {
            auto gone = write_turn(connection, pending->key, pending->turn);
            evicted_keys.insert(evicted_keys.end(), gone.begin(), gone.end());
          }
        });
      }
    } catch (const std::exception& error) {
      if (!worth_trying_again(error)) forget_deletions_before(batch);  // the batch is lost
      throw;
    }
    forget_deletions_before(batch);
    order.unlock();
    evicted(evicted_keys);
  }

  // The turns of `batch` that no deletion since they were queued has taken out.
  std::vector<const Pending*> still_wanted(const std::deque<Pending>& batch) {
    std::lock_guard lock(mutex_);
    std::vector<const Pending*> kept;
    for (const Pending& pending : batch) {
      auto session = removed_sessions_.find(pending.key);
      if (session != removed_sessions_.end() && pending.sequence < session->second) continue;
      auto owner = removed_owners_.find({pending.key.tenant, pending.key.owner});
      if (owner != removed_owners_.end() && pending.sequence < owner->second) continue;
      kept.push_back(&pending);
    }
    return kept;
  }

  // The batch is done with: the deletions that could only concern it and turns before it
  // are needed no more.
  void forget_deletions_before(const std::deque<Pending>& batch) {
    uint64_t next = 0;
    for (const Pending& pending : batch)
      next = std::max(next, pending.sequence + 1);
    std::lock_guard lock(mutex_);
    std::erase_if(removed_sessions_, [&](const auto& entry) { return entry.second <= next; });
    std::erase_if(removed_owners_, [&](const auto& entry) { return entry.second <= next; });
  }

  int64_t delete_expired(int64_t now) {
    int64_t removed = 0;
    for (;;) {
      int64_t chunk =
          client_
              ->exec(
                  "DELETE FROM history_turns WHERE id IN (SELECT id FROM "
                  "history_turns WHERE time < $1 LIMIT $2)",
                  {Param::integer(retention_.expired_before(now)), Param::integer(kSweepChunk)},
                  "deleting expired turns")
              .changed_rows();
      removed += chunk;
      if (chunk < kSweepChunk) return removed;
    }
  }

  int64_t evict_crowded_owners() {
    postgres::Result crowded = client_->exec(
        "SELECT tenant, owner FROM history_turns GROUP BY tenant, owner HAVING COUNT(DISTINCT "
        "session) > $1",
        {Param::integer(retention_.max_sessions_per_owner)}, "finding owners past their limit");
    std::vector<SessionKey> evicted_keys;
    for (int row = 0; row < crowded.rows(); ++row) {
      SessionKey owner{crowded.bytes(row, 0), crowded.bytes(row, 1), ""};
      auto gone = client_->transaction([&](Connection& connection) {
        lock_owner(connection, owner);
        return evict_past_limit(connection, owner, retention_.max_sessions_per_owner);
      });
      evicted_keys.insert(evicted_keys.end(), gone.begin(), gone.end());
    }
    evicted(evicted_keys);
    return static_cast<int64_t>(evicted_keys.size());
  }

  void count_lost(const char* why) {
    std::fprintf(stderr, "chatflow: history: %s (1 turns lost)\n", why);
    std::lock_guard lock(mutex_);
    ++lost_;
    last_failure_time_ = unix_now();
  }

  std::shared_ptr<postgres::Client> client_;
  Retention retention_;
  // Held by each try of the writer's batch and by deletions, so that no deletion commits
  // while a try is under way. Taken before mutex_, never while holding it.
  std::mutex write_order_mutex_;
  mutable std::mutex mutex_;
  int64_t lost_ = 0;  // durable appends that failed
  int64_t last_failure_time_ = 0;
  uint64_t next_sequence_ = 0;  // of the next queued turn
  // Deletions made while a turn they concern waited in the writer's batch: the sequence of the
  // first turn queued after each. A turn before it is not written.
  std::map<SessionKey, uint64_t> removed_sessions_;
  std::map<std::pair<std::string, std::string>, uint64_t> removed_owners_;
  std::unique_ptr<storage::BatchWriter<Pending>> writer_;  // last: its thread uses the rest
};

}  // namespace

std::unique_ptr<HistoryStore> make_postgres_store(std::shared_ptr<postgres::Client> client,
                                                  Retention retention, size_t write_buffer_rows) {
  return std::make_unique<PostgresStore>(std::move(client), retention, write_buffer_rows);
}

}  // namespace chatflow::history
