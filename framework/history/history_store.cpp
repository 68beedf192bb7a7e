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
  std::vector<Turn> load(const std::string& tenant, const std::string& session) override {
    std::lock_guard lock(mutex_);
    auto found = sessions_.find({tenant, session});
    return found == sessions_.end() ? std::vector<Turn>{} : found->second;
  }
  void append(const std::string& tenant, const std::string& session, Turn turn, bool) override {
    if (turn.time == 0) turn.time = static_cast<int64_t>(std::time(nullptr));
    std::lock_guard lock(mutex_);
    sessions_[{tenant, session}].push_back(std::move(turn));
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::vector<Turn>> sessions_;
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
    // WAL with synchronous=NORMAL: a committed transaction is in the log file, so it survives
    // the process being killed (not a power cut, which the OS page cache does not survive).
    exec(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        "CREATE TABLE IF NOT EXISTS turns ("
        "  id INTEGER PRIMARY KEY,"
        "  tenant TEXT NOT NULL, session TEXT NOT NULL, time INTEGER NOT NULL,"
        "  user TEXT NOT NULL, assistant TEXT NOT NULL, status TEXT NOT NULL,"
        "  prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL);"
        "CREATE INDEX IF NOT EXISTS turns_session ON turns (tenant, session, id);");
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

  std::vector<Turn> load(const std::string& tenant, const std::string& session) override {
    std::vector<Turn> turns;
    std::lock_guard lock(database_mutex_);
    sqlite::Statement query(database_,
                            "SELECT user, assistant, status, prompt_tokens, completion_tokens, "
                            "time FROM turns WHERE tenant = ? AND session = ? ORDER BY id");
    sqlite::bind_text(query.get(), 1, tenant);
    sqlite::bind_text(query.get(), 2, session);
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
      if (pending.tenant == tenant && pending.session == session) turns.push_back(pending.turn);
    }
    return turns;
  }

  void append(const std::string& tenant, const std::string& session, Turn turn,
              bool durable) override {
    if (turn.time == 0) turn.time = static_cast<int64_t>(std::time(nullptr));
    std::unique_lock lock(mutex_);
    uint64_t ticket = ++queued_;
    queue_.push_back({tenant, session, std::move(turn)});
    work_.notify_one();
    if (durable)
      committed_changed_.wait(lock, [&] { return committed_ >= ticket || failed_ >= ticket; });
  }

 private:
  struct Pending {
    std::string tenant;
    std::string session;
    Turn turn;
  };

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
      uint64_t last;
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() && stopping_) return;
        batch.swap(queue_);
        last = queued_;
      }
      bool ok = true;
      try {
        std::lock_guard database_lock(database_mutex_);
        exec("BEGIN");
        try {
          sqlite::Statement insert(database_,
                                   "INSERT INTO turns (tenant, session, time, user, assistant, "
                                   "status, prompt_tokens, completion_tokens) "
                                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
          for (const auto& pending : batch) {
            insert.reset();
            sqlite::bind_text(insert.get(), 1, pending.tenant);
            sqlite::bind_text(insert.get(), 2, pending.session);
            sqlite3_bind_int64(insert.get(), 3, pending.turn.time);
            sqlite::bind_text(insert.get(), 4, pending.turn.user);
            sqlite::bind_text(insert.get(), 5, pending.turn.assistant);
            sqlite::bind_text(insert.get(), 6, to_string(pending.turn.status));
            sqlite3_bind_int64(insert.get(), 7, pending.turn.prompt_tokens);
            sqlite3_bind_int64(insert.get(), 8, pending.turn.completion_tokens);
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
        (ok ? committed_ : failed_) = last;
      }
      committed_changed_.notify_all();
    }
  }

  std::string path_;
  sqlite3* database_ = nullptr;
  std::mutex database_mutex_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable committed_changed_;
  std::deque<Pending> queue_;
  uint64_t queued_ = 0;
  uint64_t committed_ = 0;
  uint64_t failed_ = 0;
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
