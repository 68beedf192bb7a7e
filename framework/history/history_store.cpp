#include "framework/history/history_store.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include <sqlite3.h>

#include "framework/history/session_title.h"
#include "framework/storage/sqlite.h"

namespace chatflow::history {

std::string_view to_string(TurnStatus status) {
  switch (status) {
    case TurnStatus::completed:
      return "completed";
    case TurnStatus::cancelled:
      return "cancelled";
    case TurnStatus::filtered:
      return "filtered";
    case TurnStatus::failed:
      return "failed";
  }
  return "failed";
}

namespace {

TurnStatus status_from(std::string_view text) {
  if (text == "completed") return TurnStatus::completed;
  if (text == "cancelled") return TurnStatus::cancelled;
  if (text == "filtered") return TurnStatus::filtered;
  return TurnStatus::failed;
}

// The summary of a session from its first turn, its title and its counts.
SessionSummary summary_of(const std::string& session, const std::string& first_user,
                          const std::string& title, int64_t created, int64_t updated,
                          int64_t turns) {
  return {session, title.empty() ? title_from_message(first_user) : title, created, updated, turns};
}

class MemoryStore final : public HistoryStore {
 public:
  std::vector<Turn> load(const SessionKey& key) override {
    std::lock_guard lock(mutex_);
    auto found = sessions_.find(key);
    return found == sessions_.end() ? std::vector<Turn>{} : found->second.turns;
  }
  bool append(const SessionKey& key, Turn turn, bool) override {
    if (turn.time == 0) turn.time = static_cast<int64_t>(std::time(nullptr));
    std::lock_guard lock(mutex_);
    Session& session = sessions_[key];
    session.turns.push_back(std::move(turn));
    session.last_turn = ++turns_written_;
    return true;
  }

  std::optional<SessionPage> list(const std::string& tenant, const std::string& owner, size_t limit,
                                  const std::string& after) override {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<int64_t, const SessionKey*>> order;  // by last turn, newest first
    for (const auto& [key, session] : sessions_) {
      if (key.tenant == tenant && key.owner == owner) order.push_back({session.last_turn, &key});
    }
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a > b; });
    size_t start = 0;
    if (!after.empty()) {
      auto cursor = std::find_if(order.begin(), order.end(),
                                 [&](const auto& entry) { return entry.second->session == after; });
      if (cursor == order.end()) return std::nullopt;
      start = static_cast<size_t>(cursor - order.begin()) + 1;
    }
    SessionPage page;
    for (size_t i = start; i < order.size(); ++i) {
      if (page.sessions.size() == limit) {
        page.has_more = true;
        break;
      }
      page.sessions.push_back(summary_locked(*order[i].second));
    }
    return page;
  }

  std::optional<SessionSummary> summary(const SessionKey& key) override {
    std::lock_guard lock(mutex_);
    if (!sessions_.count(key)) return std::nullopt;
    return summary_locked(key);
  }

  bool remove(const SessionKey& key) override {
    std::lock_guard lock(mutex_);
    return sessions_.erase(key) > 0;
  }

  std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) override {
    std::lock_guard lock(mutex_);
    auto found = sessions_.find(key);
    if (found == sessions_.end()) return std::nullopt;
    found->second.title = title;
    return summary_locked(key);
  }

 private:
  struct Session {
    std::vector<Turn> turns;  // never empty
    std::string title;
    int64_t last_turn = 0;  // when its last turn came, counting the store's turns
  };

  SessionSummary summary_locked(const SessionKey& key) const {
    const Session& session = sessions_.at(key);
    return summary_of(key.session, session.turns.front().user, session.title,
                      session.turns.front().time, session.turns.back().time,
                      static_cast<int64_t>(session.turns.size()));
  }

  std::mutex mutex_;
  std::map<SessionKey, Session> sessions_;
  int64_t turns_written_ = 0;
};

// One row per session of (tenant ?1, owner ?2): session, first user message, title (or ''),
// created, updated, turns; `sessions.last` is its highest turn id.
constexpr std::string_view kSummarySelect =
    "SELECT sessions.session, first.user, COALESCE(titles.title, ''), sessions.created, "
    "sessions.updated, sessions.turns FROM (SELECT session, MIN(id) AS first_id, MAX(id) AS last, "
    "MIN(time) AS created, MAX(time) AS updated, COUNT(*) AS turns FROM turns WHERE tenant = ?1 "
    "AND owner = ?2 GROUP BY session) AS sessions JOIN turns AS first ON first.id = "
    "sessions.first_id LEFT JOIN session_titles AS titles ON titles.tenant = ?1 AND titles.owner "
    "= ?2 AND titles.session = sessions.session ";

class SqliteStore final : public HistoryStore {
 public:
  explicit SqliteStore(const std::string& path) : path_(path) {
    if (sqlite3_open_v2(path.c_str(), &database_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                        nullptr) != SQLITE_OK) {
      std::string message = database_ ? sqlite3_errmsg(database_) : "out of memory";
      sqlite3_close(database_);
      throw std::runtime_error("cannot open history database " + path + ": " + message);
    }
    sqlite3_busy_timeout(database_, 5000);
    try {
      sqlite::check_usable(database_, path);
    } catch (const std::exception& error) {
      sqlite3_close(database_);
      throw std::runtime_error(std::string("history database ") + error.what());
    }
    // WAL with synchronous=NORMAL: a committed transaction is in the log file, so it survives
    // the process being killed (not a power cut, which the OS page cache does not survive).
    exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
    // The schema in one transaction: a new file's first pages reach the log once, not once per
    // table.
    exec("BEGIN");
    try {
      exec(
          "CREATE TABLE IF NOT EXISTS turns ("
          "  id INTEGER PRIMARY KEY,"
          "  tenant TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', session TEXT NOT NULL,"
          "  time INTEGER NOT NULL,"
          "  user TEXT NOT NULL, assistant TEXT NOT NULL, status TEXT NOT NULL,"
          "  prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL);");
      add_owner_column();
      exec("CREATE INDEX IF NOT EXISTS turns_owner_session ON turns (tenant, owner, session, id);");
      // Titles came after turns: a file written before them simply has no table yet.
      exec(
          "CREATE TABLE IF NOT EXISTS session_titles ("
          "  tenant TEXT NOT NULL, owner TEXT NOT NULL, session TEXT NOT NULL, title TEXT NOT NULL,"
          "  PRIMARY KEY (tenant, owner, session)) WITHOUT ROWID;");
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(database_, "ROLLBACK", nullptr, nullptr, nullptr);
      sqlite3_close(database_);
      throw;
    }
    writer_ = std::thread([this] { run(); });
  }

  ~SqliteStore() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    writer_.join();
    insert_.reset();
    sqlite3_close(database_);
  }

  std::vector<Turn> load(const SessionKey& key) override {
    std::vector<Turn> turns;
    std::lock_guard lock(database_mutex_);
    sqlite::Statement query(database_,
                            "SELECT user, assistant, status, prompt_tokens, completion_tokens, "
                            "time FROM turns WHERE tenant = ? AND owner = ? AND session = ? "
                            "ORDER BY id");
    sqlite::bind_text(query.get(), 1, key.tenant);
    sqlite::bind_text(query.get(), 2, key.owner);
    sqlite::bind_text(query.get(), 3, key.session);
    while (query.step()) {
      Turn turn;
      turn.user = sqlite::column_text(query.get(), 0);
      turn.assistant = sqlite::column_text(query.get(), 1);
      turn.status = status_from(sqlite::column_text(query.get(), 2));
      turn.prompt_tokens = sqlite3_column_int64(query.get(), 3);
      turn.completion_tokens = sqlite3_column_int64(query.get(), 4);
      turn.time = sqlite3_column_int64(query.get(), 5);
      turns.push_back(std::move(turn));
    }
    // Turns still waiting for the writer belong to the session too (unless it is being deleted).
    std::lock_guard queue_lock(mutex_);
    for (const auto& pending : queue_) {
      if (pending.key != key) continue;
      if (pending.operation == Operation::append) turns.push_back(pending.turn);
      if (pending.operation == Operation::remove) turns.clear();
    }
    return turns;
  }

  bool append(const SessionKey& key, Turn turn, bool durable) override {
    if (turn.time == 0) turn.time = static_cast<int64_t>(std::time(nullptr));
    if (!durable) {
      std::lock_guard lock(mutex_);
      queue_.push_back({Operation::append, key, std::move(turn), {}, nullptr});
      work_.notify_one();
      return true;
    }
    return commit({Operation::append, key, std::move(turn), {}, nullptr}).ok;
  }

  std::optional<SessionPage> list(const std::string& tenant, const std::string& owner, size_t limit,
                                  const std::string& after) override {
    std::lock_guard lock(database_mutex_);
    // The newest activity is the session's highest turn id: unlike times in seconds, no two
    // sessions share it, so a page ends where the next begins.
    int64_t before = INT64_MAX;
    if (!after.empty()) {
      sqlite::Statement cursor(database_,
                               "SELECT MAX(id) FROM turns WHERE tenant = ? AND owner = ? AND "
                               "session = ?");
      sqlite::bind_text(cursor.get(), 1, tenant);
      sqlite::bind_text(cursor.get(), 2, owner);
      sqlite::bind_text(cursor.get(), 3, after);
      if (!cursor.step() || sqlite3_column_type(cursor.get(), 0) == SQLITE_NULL)
        return std::nullopt;
      before = sqlite3_column_int64(cursor.get(), 0);
    }
    std::string sql(kSummarySelect);
    sql += "WHERE sessions.last < ?3 ORDER BY sessions.last DESC LIMIT ?4";
    sqlite::Statement query(database_, sql.c_str());
    sqlite::bind_text(query.get(), 1, tenant);
    sqlite::bind_text(query.get(), 2, owner);
    sqlite3_bind_int64(query.get(), 3, before);
    sqlite3_bind_int64(query.get(), 4,
                       static_cast<int64_t>(std::min<size_t>(limit, INT32_MAX)) + 1);
    SessionPage page;
    while (query.step()) {
      if (page.sessions.size() == limit) {
        page.has_more = true;
        break;
      }
      page.sessions.push_back(summary_row(query));
    }
    return page;
  }

  std::optional<SessionSummary> summary(const SessionKey& key) override {
    std::lock_guard lock(database_mutex_);
    return summary_locked(key);
  }

  bool remove(const SessionKey& key) override {
    Written outcome = commit({Operation::remove, key, {}, {}, nullptr});
    if (!outcome.ok)
      throw std::runtime_error("history database " + path_ + ": the session was not deleted");
    return outcome.changes > 0;
  }

  std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) override {
    Written outcome = commit({Operation::rename, key, {}, title, nullptr});
    if (!outcome.ok)
      throw std::runtime_error("history database " + path_ + ": the title was not saved");
    if (outcome.changes == 0) return std::nullopt;
    std::lock_guard lock(database_mutex_);
    return summary_locked(key);
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
  // A durable operation's outcome, set by the writer (under mutex_).
  struct Written {
    bool done = false;
    bool ok = false;
    int64_t changes = 0;  // rows the operation changed
  };
  // Every write goes through the writer in order, so a deletion cannot be overtaken by a turn
  // of the same session that was queued before it.
  enum class Operation { append, remove, rename };
  struct Pending {
    Operation operation = Operation::append;
    SessionKey key;
    Turn turn;                         // append
    std::string title;                 // rename
    std::shared_ptr<Written> written;  // null: nobody waits
  };

  // Queues `pending` and waits until the writer committed it (or failed to).
  Written commit(Pending pending) {
    auto written = std::make_shared<Written>();
    pending.written = written;
    std::unique_lock lock(mutex_);
    queue_.push_back(std::move(pending));
    work_.notify_one();
    committed_changed_.wait(lock, [&] { return written->done; });
    return *written;
  }

  std::optional<SessionSummary> summary_locked(const SessionKey& key) {
    std::string sql(kSummarySelect);
    sql += "WHERE sessions.session = ?3";
    sqlite::Statement query(database_, sql.c_str());
    sqlite::bind_text(query.get(), 1, key.tenant);
    sqlite::bind_text(query.get(), 2, key.owner);
    sqlite::bind_text(query.get(), 3, key.session);
    if (!query.step()) return std::nullopt;
    return summary_row(query);
  }

  static SessionSummary summary_row(sqlite::Statement& row) {
    return summary_of(sqlite::column_text(row.get(), 0), sqlite::column_text(row.get(), 1),
                      sqlite::column_text(row.get(), 2), sqlite3_column_int64(row.get(), 3),
                      sqlite3_column_int64(row.get(), 4), sqlite3_column_int64(row.get(), 5));
  }

  // Files written before sessions had owners: their turns belong to no owner, so nobody reads
  // them as theirs.
  void add_owner_column() {
    sqlite::Statement columns(database_, "PRAGMA table_info(turns)");
    while (columns.step()) {
      if (sqlite::column_text(columns.get(), 1) == "owner") return;
    }
    exec("ALTER TABLE turns ADD COLUMN owner TEXT NOT NULL DEFAULT ''");
  }

  void exec(const char* sql) {
    try {
      sqlite::exec(database_, sql);
    } catch (const std::exception& error) {
      throw std::runtime_error("history database " + path_ + ": " + error.what());
    }
  }

  // One queued operation, inside the writer's transaction; returns the rows it changed.
  int64_t write(const Pending& pending) {
    auto bind_key = [&](sqlite::Statement& statement) {
      sqlite::bind_text(statement.get(), 1, pending.key.tenant);
      sqlite::bind_text(statement.get(), 2, pending.key.owner);
      sqlite::bind_text(statement.get(), 3, pending.key.session);
    };
    switch (pending.operation) {
      case Operation::append: {
        if (!insert_) {
          insert_ = std::make_unique<sqlite::Statement>(
              database_,
              "INSERT INTO turns (tenant, owner, session, time, user, assistant, status, "
              "prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
        }
        sqlite::Statement& insert = *insert_;
        insert.reset();
        bind_key(insert);
        sqlite3_bind_int64(insert.get(), 4, pending.turn.time);
        sqlite::bind_text(insert.get(), 5, pending.turn.user);
        sqlite::bind_text(insert.get(), 6, pending.turn.assistant);
        sqlite::bind_text(insert.get(), 7, to_string(pending.turn.status));
        sqlite3_bind_int64(insert.get(), 8, pending.turn.prompt_tokens);
        sqlite3_bind_int64(insert.get(), 9, pending.turn.completion_tokens);
        insert.step();
        return 1;
      }
      case Operation::remove: {
        sqlite::Statement turns(database_,
                                "DELETE FROM turns WHERE tenant = ? AND owner = ? AND session = ?");
        bind_key(turns);
        turns.step();
        int64_t removed = sqlite3_changes(database_);
        sqlite::Statement title(
            database_, "DELETE FROM session_titles WHERE tenant = ? AND owner = ? AND session = ?");
        bind_key(title);
        title.step();
        return removed;
      }
      case Operation::rename: {
        // Only a session with turns gets a title: one that does not exist stays so.
        sqlite::Statement upsert(
            database_,
            "INSERT INTO session_titles (tenant, owner, session, title) SELECT ?1, ?2, ?3, ?4 "
            "WHERE EXISTS (SELECT 1 FROM turns WHERE tenant = ?1 AND owner = ?2 AND session = "
            "?3) ON CONFLICT (tenant, owner, session) DO UPDATE SET title = excluded.title");
        bind_key(upsert);
        sqlite::bind_text(upsert.get(), 4, pending.title);
        upsert.step();
        return sqlite3_changes(database_);
      }
    }
    return 0;
  }

  // One transaction per batch: a turn waiting to be durable waits for one commit, however many
  // sessions are writing.
  void run() {
    while (true) {
      std::deque<Pending> batch;
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() && stopping_) return;
        batch.swap(queue_);
      }
      bool ok = true;
      std::vector<int64_t> changes(batch.size(), 0);
      try {
        std::lock_guard database_lock(database_mutex_);
        exec("BEGIN");
        try {
          for (size_t i = 0; i < batch.size(); ++i)
            changes[i] = write(batch[i]);
        } catch (...) {
          sqlite3_exec(database_, "ROLLBACK", nullptr, nullptr, nullptr);
          throw;
        }
        exec("COMMIT");
      } catch (const std::exception& error) {
        ok = false;
        std::fprintf(stderr, "chatflow: history %s: %s\n", path_.c_str(), error.what());
      }
      {
        std::lock_guard lock(mutex_);
        if (!ok) {
          lost_ += std::count_if(batch.begin(), batch.end(), [](const Pending& pending) {
            return pending.operation == Operation::append;
          });
          last_failure_time_ = static_cast<int64_t>(std::time(nullptr));
        }
        for (size_t i = 0; i < batch.size(); ++i) {
          if (!batch[i].written) continue;
          batch[i].written->done = true;
          batch[i].written->ok = ok;
          batch[i].written->changes = changes[i];
        }
      }
      committed_changed_.notify_all();
    }
  }

  std::string path_;
  sqlite3* database_ = nullptr;
  std::unique_ptr<sqlite::Statement> insert_;  // the writer's, prepared once
  std::mutex database_mutex_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable committed_changed_;
  std::deque<Pending> queue_;
  int64_t lost_ = 0;
  int64_t last_failure_time_ = 0;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace

std::unique_ptr<HistoryStore> make_memory_store() {
  return std::make_unique<MemoryStore>();
}

std::unique_ptr<HistoryStore> make_sqlite_store(const std::string& path) {
  return std::make_unique<SqliteStore>(path);
}

}  // namespace chatflow::history
