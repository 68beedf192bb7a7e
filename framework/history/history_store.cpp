// The SQLite history store (history_store.h), and the turn statuses every store shares.
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

int64_t unix_now() {
  return static_cast<int64_t>(std::time(nullptr));
}

// One row per session of (tenant ?1, owner ?2) with a turn written at or after ?5 (the TTL's
// cutoff): session, first user message, title (or ''), created, updated, turns;
// `sessions.last` is its highest turn id.
constexpr std::string_view kSummarySelect =
    "SELECT sessions.session, first.user, COALESCE(titles.title, ''), sessions.created, "
    "sessions.updated, sessions.turns FROM (SELECT session, MIN(id) AS first_id, MAX(id) AS last, "
    "MIN(time) AS created, MAX(time) AS updated, COUNT(*) AS turns FROM turns WHERE tenant = ?1 "
    "AND owner = ?2 AND time >= ?5 GROUP BY session) AS sessions JOIN turns AS first ON first.id "
    "= sessions.first_id LEFT JOIN session_titles AS titles ON titles.tenant = ?1 AND "
    "titles.owner = ?2 AND titles.session = sessions.session ";

class SqliteStore final : public HistoryStore {
 public:
  SqliteStore(const std::string& path, Retention retention, SqliteSweepOptions sweep)
      : path_(path), retention_(retention), sweep_(std::move(sweep)) {
    sweep_.chunk_turns = std::max<int64_t>(sweep_.chunk_turns, 1);
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
          "  prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,"
          "  parent_back INTEGER NOT NULL DEFAULT 1, question_back INTEGER NOT NULL DEFAULT 0,"
          "  active_back INTEGER NOT NULL DEFAULT 0);");
      add_owner_column();
      add_branch_columns();
      exec("CREATE INDEX IF NOT EXISTS turns_owner_session ON turns (tenant, owner, session, id);");
      // The sweep removes expired turns by time (only kept with a TTL: every index costs each
      // write).
      if (retention_.ttl_days > 0) exec("CREATE INDEX IF NOT EXISTS turns_time ON turns (time);");
      // Titles came after turns: a file written before them simply has no table yet.
      exec(
          "CREATE TABLE IF NOT EXISTS session_titles ("
          "  tenant TEXT NOT NULL, owner TEXT NOT NULL, session TEXT NOT NULL, title TEXT NOT NULL,"
          "  PRIMARY KEY (tenant, owner, session)) WITHOUT ROWID;");
      // The Responses API's kept responses (kept_responses.h) came later still.
      exec(
          "CREATE TABLE IF NOT EXISTS responses ("
          "  tenant TEXT NOT NULL, owner TEXT NOT NULL, id TEXT NOT NULL, time INTEGER NOT NULL,"
          "  response TEXT NOT NULL, conversation TEXT NOT NULL,"
          "  PRIMARY KEY (tenant, owner, id)) WITHOUT ROWID;");
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

  std::vector<Turn> load(const SessionKey& key) override { return load_recent(key, 0); }

  std::vector<Turn> load_recent(const SessionKey& key, size_t max_turns) override {
    int64_t cutoff = retention_.expired_before(unix_now());
    std::vector<Turn> turns;
    std::lock_guard lock(database_mutex_);
    sqlite::Statement query(database_,
                            "SELECT user, assistant, status, prompt_tokens, completion_tokens, "
                            "time, parent_back, question_back, active_back FROM (SELECT * FROM "
                            "turns WHERE tenant = ?1 AND owner = ?2 AND "
                            "session = ?3 AND time >= ?4 ORDER BY id DESC LIMIT ?5) ORDER BY id");
    sqlite::bind_text(query.get(), 1, key.tenant);
    sqlite::bind_text(query.get(), 2, key.owner);
    sqlite::bind_text(query.get(), 3, key.session);
    sqlite3_bind_int64(query.get(), 4, cutoff);
    sqlite3_bind_int64(
        query.get(), 5,
        max_turns == 0 ? -1 : static_cast<int64_t>(std::min<size_t>(max_turns, INT32_MAX)));
    while (query.step()) {
      Turn turn;
      turn.user = sqlite::column_text(query.get(), 0);
      turn.assistant = sqlite::column_text(query.get(), 1);
      turn.status = status_from(sqlite::column_text(query.get(), 2));
      turn.prompt_tokens = sqlite3_column_int64(query.get(), 3);
      turn.completion_tokens = sqlite3_column_int64(query.get(), 4);
      turn.time = sqlite3_column_int64(query.get(), 5);
      turn.parent_back = sqlite3_column_int64(query.get(), 6);
      turn.question_back = sqlite3_column_int64(query.get(), 7);
      turn.active_back = sqlite3_column_int64(query.get(), 8);
      turns.push_back(std::move(turn));
    }
    // Turns still waiting for the writer belong to the session too (unless it is being deleted).
    std::lock_guard queue_lock(mutex_);
    for (const auto& pending : queue_) {
      bool owners = pending.key.tenant == key.tenant && pending.key.owner == key.owner;
      if (pending.operation == Operation::remove_owner && owners) turns.clear();
      if (pending.key != key) continue;
      if (pending.operation == Operation::append && pending.turn.time >= cutoff)
        turns.push_back(pending.turn);
      if (pending.operation == Operation::remove) turns.clear();
      if (pending.operation == Operation::set_active && !turns.empty())
        turns.back().active_back = pending.turn.active_back;
    }
    if (max_turns > 0 && turns.size() > max_turns)
      turns.erase(turns.begin(), turns.end() - static_cast<std::ptrdiff_t>(max_turns));
    return turns;
  }

  bool append(const SessionKey& key, Turn turn, bool durable) override {
    if (turn.time == 0) turn.time = unix_now();
    Pending pending(Operation::append, key, std::move(turn));
    if (!durable) {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(pending));
      work_.notify_one();
      return true;
    }
    return commit(std::move(pending)).ok;
  }

  std::optional<SessionPage> list(const std::string& tenant, const std::string& owner, size_t limit,
                                  const std::string& after) override {
    int64_t cutoff = retention_.expired_before(unix_now());
    std::lock_guard lock(database_mutex_);
    // The newest activity is the session's highest turn id: unlike times in seconds, no two
    // sessions share it, so a page ends where the next begins.
    int64_t before = INT64_MAX;
    if (!after.empty()) {
      sqlite::Statement cursor(database_,
                               "SELECT MAX(id) FROM turns WHERE tenant = ? AND owner = ? AND "
                               "session = ? AND time >= ?");
      sqlite::bind_text(cursor.get(), 1, tenant);
      sqlite::bind_text(cursor.get(), 2, owner);
      sqlite::bind_text(cursor.get(), 3, after);
      sqlite3_bind_int64(cursor.get(), 4, cutoff);
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
    sqlite3_bind_int64(query.get(), 5, cutoff);
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
    Written outcome = commit(Pending(Operation::remove, key));
    if (!outcome.ok)
      throw std::runtime_error("history database " + path_ + ": the session was not deleted");
    return outcome.changes > 0;
  }

  std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) override {
    Pending pending(Operation::rename, key);
    pending.title = title;
    Written outcome = commit(std::move(pending));
    if (!outcome.ok)
      throw std::runtime_error("history database " + path_ + ": the title was not saved");
    if (outcome.changes == 0) return std::nullopt;
    std::lock_guard lock(database_mutex_);
    return summary_locked(key);
  }

  bool set_active(const SessionKey& key, int64_t active_back) override {
    Turn turn;
    turn.active_back = active_back;
    Written outcome = commit(Pending(Operation::set_active, key, std::move(turn)));
    if (!outcome.ok)
      throw std::runtime_error("history database " + path_ + ": the branch was not switched");
    return outcome.changes > 0;
  }

  std::vector<std::string> remove_owner(const std::string& tenant,
                                        const std::string& owner) override {
    Written outcome = commit(Pending(Operation::remove_owner, {tenant, owner, ""}));
    if (!outcome.ok)
      throw std::runtime_error("history database " + path_ + ": the sessions were not deleted");
    return outcome.sessions;
  }

  // Runs on the caller's thread (the sweeper's), in short transactions of its own, each under
  // the database lock: reads, and the writer's batches, get in between.
  SweepOutcome sweep(int64_t now) override {
    // What was queued before the sweep is swept too.
    if (!commit(Pending(Operation::barrier)).ok)
      throw std::runtime_error("history database " + path_ + ": the retention sweep failed");
    SweepOutcome outcome;
    try {
      if (retention_.ttl_days > 0) outcome.expired_turns = delete_expired(now);
      {
        std::lock_guard lock(database_mutex_);
        if (retention_.ttl_days > 0) {
          change("DELETE FROM responses WHERE time < ?4", {}, retention_.expired_before(now));
        }
        change(
            "DELETE FROM session_titles WHERE NOT EXISTS (SELECT 1 FROM turns WHERE turns.tenant "
            "= session_titles.tenant AND turns.owner = session_titles.owner AND turns.session = "
            "session_titles.session)",
            {});
      }
      if (retention_.max_sessions_per_owner > 0) outcome.evicted_sessions = evict_crowded_owners();
    } catch (const std::exception& error) {
      std::lock_guard lock(mutex_);
      last_failure_time_ = unix_now();
      throw std::runtime_error("history database " + path_ +
                               ": the retention sweep failed: " + error.what());
    }
    return outcome;
  }

  // Written here rather than by the writer thread: each is committed before the call returns.
  void keep_response(const SessionKey& key, const KeptResponse& response, int64_t time) override {
    std::lock_guard lock(database_mutex_);
    try {
      sqlite::Statement insert(
          database_,
          "INSERT OR REPLACE INTO responses (tenant, owner, id, time, response, "
          "conversation) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
      bind_key(insert.get(), key);
      sqlite3_bind_int64(insert.get(), 4, time);
      sqlite::bind_text(insert.get(), 5, response.response_json);
      sqlite::bind_text(insert.get(), 6, response.conversation_json);
      insert.step();
      // The owner's oldest past the limit, never the one just kept.
      if (retention_.max_responses_per_owner > 0) {
        change(
            "DELETE FROM responses WHERE tenant = ?1 AND owner = ?2 AND id IN (SELECT id FROM "
            "responses WHERE tenant = ?1 AND owner = ?2 AND id != ?3 ORDER BY time DESC, id DESC "
            "LIMIT -1 OFFSET ?4)",
            key, retention_.max_responses_per_owner - 1);
      }
    } catch (const std::exception& error) {
      throw std::runtime_error("history database " + path_ +
                               ": the response was not kept: " + error.what());
    }
  }

  std::optional<KeptResponse> kept_response(const SessionKey& key) override {
    std::lock_guard lock(database_mutex_);
    sqlite::Statement query(database_,
                            "SELECT response, conversation FROM responses WHERE tenant = ?1 AND "
                            "owner = ?2 AND id = ?3 AND time >= ?4");
    bind_key(query.get(), key);
    sqlite3_bind_int64(query.get(), 4, retention_.expired_before(unix_now()));
    if (!query.step()) return std::nullopt;
    return KeptResponse{sqlite::column_text(query.get(), 0), sqlite::column_text(query.get(), 1)};
  }

  bool forget_response(const SessionKey& key) override {
    std::lock_guard lock(database_mutex_);
    try {
      return change("DELETE FROM responses WHERE tenant = ?1 AND owner = ?2 AND id = ?3", key) > 0;
    } catch (const std::exception& error) {
      throw std::runtime_error("history database " + path_ +
                               ": the response was not deleted: " + error.what());
    }
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
    int64_t changes = 0;                // rows the operation changed
    std::vector<std::string> sessions;  // remove_owner: the sessions it deleted
  };
  // Every write of a session goes through the writer in order, so a deletion cannot be
  // overtaken by a turn of the same session that was queued before it. A barrier writes
  // nothing: once it is done, so is everything queued before it.
  enum class Operation { append, remove, rename, remove_owner, set_active, barrier };
  struct Pending {
    explicit Pending(Operation operation, SessionKey key = {}, Turn turn = {})
        : operation(operation), key(std::move(key)), turn(std::move(turn)) {}
    Operation operation = Operation::append;
    SessionKey key;                    // remove_owner: its tenant and owner
    Turn turn;                         // append; set_active: its active_back
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
    sqlite3_bind_int64(query.get(), 5, retention_.expired_before(unix_now()));
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

  // Files written before branches: each turn's parent is the turn before it (the defaults), so
  // their sessions read as the chains they were.
  void add_branch_columns() {
    bool present = false;
    {
      sqlite::Statement columns(database_, "PRAGMA table_info(turns)");
      while (columns.step()) {
        if (sqlite::column_text(columns.get(), 1) == "parent_back") present = true;
      }
    }
    if (present) return;
    exec("ALTER TABLE turns ADD COLUMN parent_back INTEGER NOT NULL DEFAULT 1");
    exec("ALTER TABLE turns ADD COLUMN question_back INTEGER NOT NULL DEFAULT 0");
    exec("ALTER TABLE turns ADD COLUMN active_back INTEGER NOT NULL DEFAULT 0");
  }

  void exec(const char* sql) {
    try {
      sqlite::exec(database_, sql);
    } catch (const std::exception& error) {
      throw std::runtime_error("history database " + path_ + ": " + error.what());
    }
  }

  // Runs `sql` with those of ?1..?3 it has bound to the key's tenant, owner and session, ?4 to
  // `number` and ?5 to `text`; returns the rows it changed.
  static void bind_key(sqlite3_stmt* statement, const SessionKey& key) {
    sqlite::bind_text(statement, 1, key.tenant);
    sqlite::bind_text(statement, 2, key.owner);
    sqlite::bind_text(statement, 3, key.session);
  }

  int64_t change(const char* sql, const SessionKey& key, int64_t number = 0,
                 std::string_view text = {}) {
    sqlite::Statement statement(database_, sql);
    int parameters = sqlite3_bind_parameter_count(statement.get());
    const std::string* key_parts[] = {&key.tenant, &key.owner, &key.session};
    for (int i = 1; i <= std::min(parameters, 3); ++i)
      sqlite::bind_text(statement.get(), i, *key_parts[i - 1]);
    if (parameters >= 4) sqlite3_bind_int64(statement.get(), 4, number);
    if (parameters >= 5) sqlite::bind_text(statement.get(), 5, text);
    statement.step();
    return sqlite3_changes(database_);
  }

  // Deletes the session's turns and title; returns the turns deleted.
  int64_t delete_session(const SessionKey& key) {
    int64_t removed =
        change("DELETE FROM turns WHERE tenant = ?1 AND owner = ?2 AND session = ?3", key);
    change("DELETE FROM session_titles WHERE tenant = ?1 AND owner = ?2 AND session = ?3", key);
    return removed;
  }

  // Whether the session has a turn that has not expired.
  bool has_live_turn(const SessionKey& key, int64_t cutoff) {
    sqlite::Statement last(database_,
                           "SELECT time FROM turns WHERE tenant = ? AND owner = ? AND session = ? "
                           "ORDER BY id DESC LIMIT 1");
    sqlite::bind_text(last.get(), 1, key.tenant);
    sqlite::bind_text(last.get(), 2, key.owner);
    sqlite::bind_text(last.get(), 3, key.session);
    return last.step() && sqlite3_column_int64(last.get(), 0) >= cutoff;
  }

  // Deletes the owner's least recently active sessions past max_sessions_per_owner; returns
  // them.
  std::vector<SessionKey> evict_past_limit(const std::string& tenant, const std::string& owner) {
    std::vector<SessionKey> gone;
    if (retention_.max_sessions_per_owner <= 0) return gone;
    {
      sqlite::Statement past(database_,
                             "SELECT session FROM turns WHERE tenant = ? AND owner = ? GROUP BY "
                             "session ORDER BY MAX(id) DESC LIMIT -1 OFFSET ?");
      sqlite::bind_text(past.get(), 1, tenant);
      sqlite::bind_text(past.get(), 2, owner);
      sqlite3_bind_int64(past.get(), 3, retention_.max_sessions_per_owner);
      while (past.step())
        gone.push_back({tenant, owner, sqlite::column_text(past.get(), 0)});
    }
    for (const auto& key : gone)
      delete_session(key);
    return gone;
  }

  void insert_turn(const Pending& pending) {
    if (!insert_) {
      insert_ = std::make_unique<sqlite::Statement>(
          database_,
          "INSERT INTO turns (tenant, owner, session, time, user, assistant, status, "
          "prompt_tokens, completion_tokens, parent_back, question_back, active_back) VALUES (?, "
          "?, "
          "?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    }
    sqlite::Statement& insert = *insert_;
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
    sqlite3_bind_int64(insert.get(), 10, pending.turn.parent_back);
    sqlite3_bind_int64(insert.get(), 11, pending.turn.question_back);
    sqlite3_bind_int64(insert.get(), 12, pending.turn.active_back);
    insert.step();
  }

  // A turn; one that starts a session (its first, or the first after all its turns expired)
  // first clears what the owner left expired, and then evicts past the owner's limit.
  void write_append(const Pending& pending) {
    if (!retention_.limits_anything()) return insert_turn(pending);
    int64_t cutoff = retention_.expired_before(unix_now());
    bool starts = !has_live_turn(pending.key, cutoff);
    if (starts) {
      if (retention_.ttl_days > 0)
        change("DELETE FROM turns WHERE tenant = ?1 AND owner = ?2 AND time < ?4", pending.key,
               cutoff);
      change(
          "DELETE FROM session_titles WHERE tenant = ?1 AND owner = ?2 AND NOT EXISTS (SELECT 1 "
          "FROM turns WHERE turns.tenant = ?1 AND turns.owner = ?2 AND turns.session = "
          "session_titles.session)",
          pending.key);
    }
    insert_turn(pending);
    if (!starts) return;
    auto gone = evict_past_limit(pending.key.tenant, pending.key.owner);
    batch_evicted_.insert(batch_evicted_.end(), gone.begin(), gone.end());
  }

  std::vector<std::string> write_remove_owner(const SessionKey& owner) {
    std::vector<std::string> sessions;
    {
      sqlite::Statement live(database_,
                             "SELECT DISTINCT session FROM turns WHERE tenant = ? AND owner = ? "
                             "AND time >= ?");
      sqlite::bind_text(live.get(), 1, owner.tenant);
      sqlite::bind_text(live.get(), 2, owner.owner);
      sqlite3_bind_int64(live.get(), 3, retention_.expired_before(unix_now()));
      while (live.step())
        sessions.push_back(sqlite::column_text(live.get(), 0));
    }
    change("DELETE FROM turns WHERE tenant = ?1 AND owner = ?2", owner);
    change("DELETE FROM session_titles WHERE tenant = ?1 AND owner = ?2", owner);
    change("DELETE FROM responses WHERE tenant = ?1 AND owner = ?2", owner);
    return sessions;
  }

  // The sweep's expired turns, chunk by chunk; returns how many.
  int64_t delete_expired(int64_t now) {
    int64_t removed = 0;
    for (;;) {
      int64_t chunk = 0;
      {
        std::lock_guard lock(database_mutex_);
        sqlite::Statement statement(database_,
                                    "DELETE FROM turns WHERE id IN (SELECT id FROM turns WHERE "
                                    "time < ?1 LIMIT ?2)");
        sqlite3_bind_int64(statement.get(), 1, retention_.expired_before(now));
        sqlite3_bind_int64(statement.get(), 2, sweep_.chunk_turns);
        statement.step();
        chunk = sqlite3_changes(database_);
      }
      removed += chunk;
      if (chunk < sweep_.chunk_turns) return removed;
      if (sweep_.between_chunks) sweep_.between_chunks();
    }
  }

  // The sweep's evictions past a lowered max_sessions_per_owner, an owner per transaction;
  // returns how many sessions went.
  int64_t evict_crowded_owners() {
    std::vector<std::pair<std::string, std::string>> crowded;
    {
      std::lock_guard lock(database_mutex_);
      sqlite::Statement owners(database_,
                               "SELECT tenant, owner FROM turns GROUP BY tenant, owner HAVING "
                               "COUNT(DISTINCT session) > ?");
      sqlite3_bind_int64(owners.get(), 1, retention_.max_sessions_per_owner);
      while (owners.step())
        crowded.push_back(
            {sqlite::column_text(owners.get(), 0), sqlite::column_text(owners.get(), 1)});
    }
    std::vector<SessionKey> evicted_keys;
    for (const auto& [tenant, owner] : crowded) {
      std::lock_guard lock(database_mutex_);
      exec("BEGIN");
      try {
        auto gone = evict_past_limit(tenant, owner);
        exec("COMMIT");
        evicted_keys.insert(evicted_keys.end(), gone.begin(), gone.end());
      } catch (...) {
        sqlite3_exec(database_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
      }
    }
    evicted(evicted_keys);
    return static_cast<int64_t>(evicted_keys.size());
  }

  // One queued operation, inside the writer's transaction.
  void write(const Pending& pending, Written& outcome) {
    switch (pending.operation) {
      case Operation::append:
        write_append(pending);
        outcome.changes = 1;
        return;
      case Operation::remove:
        outcome.changes = delete_session(pending.key);
        return;
      case Operation::rename:
        // Only a session with turns gets a title: one that does not exist stays so.
        outcome.changes = change(
            "INSERT INTO session_titles (tenant, owner, session, title) SELECT ?1, ?2, ?3, ?5 "
            "WHERE EXISTS (SELECT 1 FROM turns WHERE tenant = ?1 AND owner = ?2 AND session = "
            "?3 AND time >= ?4) ON CONFLICT (tenant, owner, session) DO UPDATE SET title = "
            "excluded.title",
            pending.key, retention_.expired_before(unix_now()), pending.title);
        return;
      case Operation::remove_owner:
        outcome.sessions = write_remove_owner(pending.key);
        return;
      case Operation::set_active:
        outcome.changes = change(
            "UPDATE turns SET active_back = ?4 WHERE id = (SELECT MAX(id) FROM turns WHERE "
            "tenant = ?1 AND owner = ?2 AND session = ?3)",
            pending.key, pending.turn.active_back);
        return;
      case Operation::barrier:
        return;
    }
  }

  // One transaction per batch: a turn waiting to be durable waits for one commit, however many
  // sessions are writing.
  void run() {
    while (true) {
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() && stopping_) return;
      }
      // The batch leaves the queue only under the database lock, which a load holds while it
      // reads the file and then the queue: a load sees each turn in one or the other.
      std::unique_lock database_lock(database_mutex_);
      std::deque<Pending> batch;
      {
        std::lock_guard lock(mutex_);
        batch.swap(queue_);
      }
      bool ok = true;
      std::vector<Written> outcomes(batch.size());
      batch_evicted_.clear();
      try {
        exec("BEGIN");
        try {
          for (size_t i = 0; i < batch.size(); ++i)
            write(batch[i], outcomes[i]);
        } catch (...) {
          sqlite3_exec(database_, "ROLLBACK", nullptr, nullptr, nullptr);
          throw;
        }
        exec("COMMIT");
      } catch (const std::exception& error) {
        ok = false;
        std::fprintf(stderr, "chatflow: history %s: %s\n", path_.c_str(), error.what());
      }
      database_lock.unlock();
      if (ok) evicted(batch_evicted_);
      {
        std::lock_guard lock(mutex_);
        if (!ok) {
          lost_ += std::count_if(batch.begin(), batch.end(), [](const Pending& pending) {
            return pending.operation == Operation::append;
          });
          last_failure_time_ = unix_now();
        }
        for (size_t i = 0; i < batch.size(); ++i) {
          if (!batch[i].written) continue;
          *batch[i].written = std::move(outcomes[i]);
          batch[i].written->done = true;
          batch[i].written->ok = ok;
        }
      }
      committed_changed_.notify_all();
    }
  }

  std::string path_;
  Retention retention_;
  SqliteSweepOptions sweep_;
  sqlite3* database_ = nullptr;
  std::unique_ptr<sqlite::Statement> insert_;  // the writer's, prepared once
  std::vector<SessionKey> batch_evicted_;      // the writer's: evicted in this batch
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

std::unique_ptr<HistoryStore> make_sqlite_store(const std::string& path, Retention retention,
                                                SqliteSweepOptions sweep) {
  return std::make_unique<SqliteStore>(path, retention, std::move(sweep));
}

}  // namespace chatflow::history
