#include "framework/history/history_store.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include <sqlite3.h>

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

class MemoryStore final : public HistoryStore {
 public:
  std::vector<Turn> load(const SessionKey& key) override {
    std::lock_guard lock(mutex_);
    auto found = sessions_.find(key);
    return found == sessions_.end() ? std::vector<Turn>{} : found->second;
  }
  bool append(const SessionKey& key, Turn turn, bool) override {
    if (turn.time == 0) turn.time = static_cast<int64_t>(std::time(nullptr));
    std::lock_guard lock(mutex_);
    sessions_[key].push_back(std::move(turn));
    return true;
  }

 private:
  std::mutex mutex_;
  std::map<SessionKey, std::vector<Turn>> sessions_;
};

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
    exec(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        "CREATE TABLE IF NOT EXISTS turns ("
        "  id INTEGER PRIMARY KEY,"
        "  tenant TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', session TEXT NOT NULL,"
        "  time INTEGER NOT NULL,"
        "  user TEXT NOT NULL, assistant TEXT NOT NULL, status TEXT NOT NULL,"
        "  prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL);");
    add_owner_column();
    exec("CREATE INDEX IF NOT EXISTS turns_owner_session ON turns (tenant, owner, session, id);");
    writer_ = std::thread([this] { run(); });
  }

  ~SqliteStore() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    writer_.join();
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
    // Turns still waiting for the writer belong to the session too.
    std::lock_guard queue_lock(mutex_);
    for (const auto& pending : queue_) {
      if (pending.key == key) turns.push_back(pending.turn);
    }
    return turns;
  }

  bool append(const SessionKey& key, Turn turn, bool durable) override {
    if (turn.time == 0) turn.time = static_cast<int64_t>(std::time(nullptr));
    auto written = durable ? std::make_shared<Written>() : nullptr;
    std::unique_lock lock(mutex_);
    queue_.push_back({key, std::move(turn), written});
    work_.notify_one();
    if (!durable) return true;
    committed_changed_.wait(lock, [&] { return written->done; });
    return written->ok;
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
  // A durable append's outcome, set by the writer (under mutex_).
  struct Written {
    bool done = false;
    bool ok = false;
  };
  struct Pending {
    SessionKey key;
    Turn turn;
    std::shared_ptr<Written> written;  // null: nobody waits
  };

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
      try {
        std::lock_guard database_lock(database_mutex_);
        exec("BEGIN");
        try {
          sqlite::Statement insert(database_,
                                   "INSERT INTO turns (tenant, owner, session, time, user, "
                                   "assistant, status, prompt_tokens, completion_tokens) "
                                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
          for (const auto& pending : batch) {
            insert.reset();
            sqlite::bind_text(insert.get(), 1, pending.key.tenant);
            sqlite::bind_text(insert.get(), 2, pending.key.owner);
            sqlite::bind_text(insert.get(), 3, pending.key.session);
            sqlite3_bind_int64(insert.get(), 4, pending.turn.time);
            sqlite::bind_text(insert.get(), 5, pending.turn.user);
            sqlite::bind_text(insert.get(), 6, pending.turn.assistant);
            sqlite::bind_text(insert.get(), 7, to_string(pending.turn.status));
            sqlite3_bind_int64(insert.get(), 8, pending.turn.prompt_tokens);
            sqlite3_bind_int64(insert.get(), 9, pending.turn.completion_tokens);
            insert.step();
          }
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
          lost_ += static_cast<int64_t>(batch.size());
          last_failure_time_ = static_cast<int64_t>(std::time(nullptr));
        }
        for (auto& pending : batch) {
          if (!pending.written) continue;
          pending.written->done = true;
          pending.written->ok = ok;
        }
      }
      committed_changed_.notify_all();
    }
  }

  std::string path_;
  sqlite3* database_ = nullptr;
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
