#include "framework/history/postgres_history_store.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>

#include "framework/history/session_title.h"

namespace chatflow::history {
namespace {

using postgres::Connection;
using postgres::Param;
using postgres::PostgresError;

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
  };
  return all;
}

TurnStatus status_from(std::string_view text) {
  if (text == "completed") return TurnStatus::completed;
  if (text == "cancelled") return TurnStatus::cancelled;
  if (text == "filtered") return TurnStatus::filtered;
  return TurnStatus::failed;
}

// The sessions of (tenant $1, owner $2), one row each: session, first user message, title (or
// empty), created, updated, turns. `sessions.last` is the session's highest turn id: unlike times
// in seconds no two sessions share it, so a page ends where the next begins.
constexpr std::string_view kSummarySelect =
    "SELECT sessions.session, first.user_content, COALESCE(titles.title, ''::bytea), "
    "sessions.created, sessions.updated, sessions.turns FROM (SELECT session, MIN(id) AS "
    "first_id, MAX(id) AS last, MIN(time) AS created, MAX(time) AS updated, COUNT(*) AS turns "
    "FROM history_turns WHERE tenant = $1 AND owner = $2 ";
constexpr std::string_view kSummaryJoin =
    "GROUP BY session) AS sessions JOIN history_turns AS first ON first.id = sessions.first_id "
    "LEFT JOIN history_titles AS titles ON titles.tenant = $1 AND titles.owner = $2 AND "
    "titles.session = sessions.session ";

SessionSummary summary_row(const postgres::Result& rows, int row) {
  std::string title = rows.bytes(row, 2);
  return {rows.bytes(row, 0), title.empty() ? title_from_message(rows.bytes(row, 1)) : title,
          rows.integer(row, 3), rows.integer(row, 4), rows.integer(row, 5)};
}

std::vector<Param> key_params(const SessionKey& key) {
  return {Param::bytes(key.tenant), Param::bytes(key.owner), Param::bytes(key.session)};
}

void insert_turn(Connection& connection, const SessionKey& key, const Turn& turn) {
  std::vector<Param> params = key_params(key);
  params.push_back(Param::integer(turn.time));
  params.push_back(Param::bytes(turn.user));
  params.push_back(Param::bytes(turn.assistant));
  params.push_back(Param::text(to_string(turn.status)));
  params.push_back(Param::integer(turn.prompt_tokens));
  params.push_back(Param::integer(turn.completion_tokens));
  connection.exec(
      "INSERT INTO history_turns (tenant, owner, session, time, user_content, assistant_content, "
      "status, prompt_tokens, completion_tokens) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
      params, "saving a session turn");
}

class PostgresStore final : public HistoryStore {
 public:
  explicit PostgresStore(std::shared_ptr<postgres::Client> client) : client_(std::move(client)) {
    client_->migrate("history", history_migrations());
    writer_ = std::thread([this] { run(); });
  }

  ~PostgresStore() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    writer_.join();
  }

  std::vector<Turn> load(const SessionKey& key) override {
    // A turn of the session still queued is written first (a failed or cancelled answer: rare),
    // so that what the server holds is the whole session, once.
    if (has_pending(key)) drain();
    postgres::Result rows = client_->exec(
        "SELECT user_content, assistant_content, status, prompt_tokens, completion_tokens, time "
        "FROM history_turns WHERE tenant = $1 AND owner = $2 AND session = $3 ORDER BY id",
        key_params(key), "loading a session");
    std::vector<Turn> turns;
    for (int row = 0; row < rows.rows(); ++row) {
      Turn turn;
      turn.user = rows.bytes(row, 0);
      turn.assistant = rows.bytes(row, 1);
      turn.status = status_from(rows.text(row, 2));
      turn.prompt_tokens = rows.integer(row, 3);
      turn.completion_tokens = rows.integer(row, 4);
      turn.time = rows.integer(row, 5);
      turns.push_back(std::move(turn));
    }
    return turns;
  }

  bool append(const SessionKey& key, Turn turn, bool durable) override {
    if (turn.time == 0) turn.time = static_cast<int64_t>(std::time(nullptr));
    if (!durable) {
      std::lock_guard lock(mutex_);
      queue_.push_back({key, std::move(turn)});
      work_.notify_one();
      return true;
    }
    // A queued turn of the same session goes first, so the session keeps its order.
    if (has_pending(key)) drain();
    try {
      // Committed when transaction() returns; run again if the connection broke before COMMIT.
      client_->transaction([&](Connection& connection) { insert_turn(connection, key, turn); });
      return true;
    } catch (const PostgresError& error) {
      count_lost(1, error.what());
      return false;
    }
  }

  std::optional<SessionPage> list(const std::string& tenant, const std::string& owner, size_t limit,
                                  const std::string& after) override {
    int64_t before = INT64_MAX;
    if (!after.empty()) {
      postgres::Result cursor = client_->exec(
          "SELECT MAX(id) FROM history_turns WHERE tenant = $1 AND owner = $2 AND session = $3",
          {Param::bytes(tenant), Param::bytes(owner), Param::bytes(after)},
          "finding the session a page starts after");
      if (cursor.is_null(0, 0)) return std::nullopt;
      before = cursor.integer(0, 0);
    }
    std::string sql(kSummarySelect);
    sql += kSummaryJoin;
    sql += "WHERE sessions.last < $3 ORDER BY sessions.last DESC LIMIT $4";
    postgres::Result rows = client_->exec(
        sql,
        {Param::bytes(tenant), Param::bytes(owner), Param::integer(before),
         Param::integer(static_cast<int64_t>(std::min<size_t>(limit, INT32_MAX)) + 1)},
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
    std::string sql(kSummarySelect);
    sql += "AND session = $3 ";
    sql += kSummaryJoin;
    postgres::Result rows = client_->exec(sql, key_params(key), "reading a session's summary");
    if (rows.rows() == 0) return std::nullopt;
    return summary_row(rows, 0);
  }

  bool remove(const SessionKey& key) override {
    // A queued turn of the session must not come back after the deletion.
    drain();
    try {
      return client_->transaction([&](Connection& connection) {
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
  }

  std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) override {
    drain();
    std::vector<Param> params = key_params(key);
    params.push_back(Param::bytes(title));
    int64_t changed = 0;
    try {
      // Only a session with turns gets a title: one that does not exist stays so.
      changed = client_
                    ->exec(
                        "INSERT INTO history_titles (tenant, owner, session, title) SELECT $1, "
                        "$2, $3, $4 WHERE EXISTS (SELECT 1 FROM history_turns WHERE tenant = "
                        "$1 AND owner = $2 AND session = $3) ON CONFLICT (tenant, owner, "
                        "session) DO UPDATE SET title = EXCLUDED.title",
                        params, "saving a session's title")
                    .changed_rows();
    } catch (const PostgresError& error) {
      throw std::runtime_error(std::string(error.what()) + ": the title was not saved");
    }
    if (changed == 0) return std::nullopt;
    return summary(key);
  }

  int64_t lost_turns() const override {
    std::lock_guard lock(mutex_);
    return lost_;
  }
  int64_t last_failure_time() const override {
    std::lock_guard lock(mutex_);
    return last_failure_time_;
  }

 private:
  struct Pending {
    SessionKey key;
    Turn turn;
  };

  bool has_pending(const SessionKey& key) {
    std::lock_guard lock(mutex_);
    return writing_key(key) ||
           std::any_of(queue_.begin(), queue_.end(),
                       [&](const Pending& pending) { return pending.key == key; });
  }
  bool writing_key(const SessionKey& key) const {
    return std::any_of(writing_.begin(), writing_.end(),
                       [&](const Pending& pending) { return pending.key == key; });
  }

  // Waits until the writer has written (or counted lost) everything queued so far.
  void drain() {
    std::unique_lock lock(mutex_);
    written_.wait(lock, [&] { return queue_.empty() && writing_.empty(); });
  }

  void count_lost(int64_t turns, const char* why) {
    std::fprintf(stderr, "chatflow: history: %s (%lld turns lost)\n", why,
                 static_cast<long long>(turns));
    std::lock_guard lock(mutex_);
    lost_ += turns;
    last_failure_time_ = static_cast<int64_t>(std::time(nullptr));
  }

  // One transaction per batch of queued turns.
  void run() {
    while (true) {
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() && stopping_) return;
        writing_.swap(queue_);
      }
      try {
        client_->transaction([&](Connection& connection) {
          for (const Pending& pending : writing_)
            insert_turn(connection, pending.key, pending.turn);
        });
      } catch (const std::exception& error) {
        // Any failure, not only the database's: an escaping exception would end the process.
        count_lost(static_cast<int64_t>(writing_.size()), error.what());
      } catch (...) {
        count_lost(static_cast<int64_t>(writing_.size()), "an unknown failure");
      }
      {
        std::lock_guard lock(mutex_);
        writing_.clear();
      }
      written_.notify_all();
    }
  }

  std::shared_ptr<postgres::Client> client_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable written_;
  std::deque<Pending> queue_;
  std::deque<Pending> writing_;  // the writer's batch, until it is written
  int64_t lost_ = 0;
  int64_t last_failure_time_ = 0;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace

std::unique_ptr<HistoryStore> make_postgres_store(std::shared_ptr<postgres::Client> client) {
  return std::make_unique<PostgresStore>(std::move(client));
}

}  // namespace chatflow::history
