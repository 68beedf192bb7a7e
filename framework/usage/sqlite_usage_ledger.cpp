#include "framework/usage/sqlite_usage_ledger.h"

#include <algorithm>
#include <ctime>
#include <stdexcept>

#include <sqlite3.h>

#include "framework/storage/sqlite.h"

namespace chatflow::usage {
namespace {

int64_t unix_now() {
  return static_cast<int64_t>(std::time(nullptr));
}

}  // namespace

std::shared_ptr<SqliteUsageLedger> SqliteUsageLedger::open(const std::string& path, Period period) {
  static std::mutex registry_mutex;
  static std::map<std::string, std::weak_ptr<SqliteUsageLedger>> registry;
  std::lock_guard lock(registry_mutex);
  if (auto existing = registry[path].lock()) {
    if (existing->period() != period)
      throw std::runtime_error(path + " is already open with period " +
                               std::string(to_string(existing->period())));
    return existing;
  }
  std::shared_ptr<SqliteUsageLedger> ledger(new SqliteUsageLedger(path, period));
  registry[path] = ledger;
  return ledger;
}

SqliteUsageLedger::SqliteUsageLedger(const std::string& path, Period period)
    : UsageLedger(period), path_(path) {
  if (sqlite3_open_v2(path.c_str(), &database_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    std::string message = database_ ? sqlite3_errmsg(database_) : "out of memory";
    sqlite3_close(database_);
    throw std::runtime_error("cannot open usage database " + path + ": " + message);
  }
  sqlite3_busy_timeout(database_, 5000);
  try {
    sqlite::check_usable(database_, path);
  } catch (const std::exception& error) {
    sqlite3_close(database_);
    throw std::runtime_error(std::string("usage database ") + error.what());
  }
  const char* setup =
      "PRAGMA journal_mode=WAL;"
      "PRAGMA synchronous=NORMAL;"
      "CREATE TABLE IF NOT EXISTS usage ("
      "  id INTEGER PRIMARY KEY,"
      "  time INTEGER NOT NULL,"
      "  tenant TEXT NOT NULL,"
      "  user TEXT NOT NULL,"
      "  request_id TEXT NOT NULL,"
      "  model TEXT NOT NULL,"
      "  prompt_tokens INTEGER NOT NULL,"
      "  completion_tokens INTEGER NOT NULL,"
      "  status INTEGER NOT NULL);"
      "CREATE INDEX IF NOT EXISTS usage_tenant_time ON usage (tenant, time);";
  try {
    sqlite::exec(database_, setup);
  } catch (const std::exception& error) {
    sqlite3_close(database_);
    throw std::runtime_error("cannot set up usage database " + path + ": " + error.what());
  }
  {
    std::lock_guard lock(mutex_);
    roll_period_locked();
  }
  writer_ = std::make_unique<storage::BatchWriter<UsageRecord>>(
      "usage ledger " + path, [this](const std::deque<UsageRecord>& batch) { write_batch(batch); });
}

SqliteUsageLedger::~SqliteUsageLedger() {
  writer_.reset();  // writes what is queued
  sqlite3_close(database_);
}

// Loads this period's totals from the database when the period changed (and at start).
void SqliteUsageLedger::roll_period_locked() {
  int64_t start = period_start();
  if (totals_loaded_ && start == totals_period_start_) return;
  totals_loaded_ = true;
  totals_.clear();
  totals_period_start_ = start;
  std::lock_guard database_lock(database_mutex_);
  sqlite::Statement query(database_,
                          "SELECT tenant, SUM(prompt_tokens + completion_tokens) FROM usage "
                          "WHERE time >= ? GROUP BY tenant");
  sqlite3_bind_int64(query.get(), 1, start);
  while (query.step()) {
    totals_[sqlite::column_text(query.get(), 0)] = sqlite3_column_int64(query.get(), 1);
  }
}

void SqliteUsageLedger::append(UsageRecord record) {
  if (record.time == 0) record.time = unix_now();
  {
    std::lock_guard lock(mutex_);
    roll_period_locked();
    if (record.time >= totals_period_start_)
      totals_[record.tenant] += record.prompt_tokens + record.completion_tokens;
  }
  writer_->push(std::move(record));
}

bool SqliteUsageLedger::reserve(const std::string& tenant, const std::string&, int64_t tokens,
                                std::optional<int64_t> allowance) {
  std::lock_guard lock(mutex_);
  roll_period_locked();
  int64_t& held = reserved_[tenant];
  if (allowance && totals_[tenant] + held + tokens > *allowance) return false;
  held += tokens;
  return true;
}

int64_t SqliteUsageLedger::reserved_tokens(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  auto found = reserved_.find(tenant);
  return found == reserved_.end() ? 0 : found->second;
}

void SqliteUsageLedger::settle(const std::string& tenant, const std::string&, int64_t reserved,
                               UsageRecord record) {
  {
    std::lock_guard lock(mutex_);
    auto held = reserved_.find(tenant);
    if (held != reserved_.end()) {
      held->second = std::max<int64_t>(0, held->second - reserved);
      if (held->second == 0) reserved_.erase(held);
    }
  }
  if (record.prompt_tokens == 0 && record.completion_tokens == 0) return;
  append(std::move(record));
}

int64_t SqliteUsageLedger::lost_rows() {
  return writer_->lost();
}

int64_t SqliteUsageLedger::last_failure_time() {
  return writer_->last_failure_time();
}

int64_t SqliteUsageLedger::used_tokens(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  roll_period_locked();
  auto found = totals_.find(tenant);
  return found == totals_.end() ? 0 : found->second;
}

void SqliteUsageLedger::flush() {
  writer_->flush();
}

std::vector<TenantUsage> SqliteUsageLedger::report(const std::string& tenant) {
  flush();
  std::lock_guard database_lock(database_mutex_);
  sqlite::Statement query(
      database_, tenant.empty()
                     ? "SELECT tenant, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens) FROM "
                       "usage WHERE time >= ? GROUP BY tenant ORDER BY tenant"
                     : "SELECT tenant, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens) FROM "
                       "usage WHERE time >= ? AND tenant = ? GROUP BY tenant");
  sqlite3_bind_int64(query.get(), 1, period_start());
  if (!tenant.empty()) sqlite::bind_text(query.get(), 2, tenant);
  std::vector<TenantUsage> rows;
  while (query.step()) {
    TenantUsage row;
    row.tenant = sqlite::column_text(query.get(), 0);
    row.requests = sqlite3_column_int64(query.get(), 1);
    row.prompt_tokens = sqlite3_column_int64(query.get(), 2);
    row.completion_tokens = sqlite3_column_int64(query.get(), 3);
    rows.push_back(std::move(row));
  }
  return rows;
}

void SqliteUsageLedger::write_batch(const std::deque<UsageRecord>& batch) {
  std::lock_guard database_lock(database_mutex_);
  sqlite::exec(database_, "BEGIN");
  try {
    sqlite::Statement insert(
        database_,
        "INSERT INTO usage (time, tenant, user, request_id, model, prompt_tokens, "
        "completion_tokens, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    for (const auto& record : batch) {
      insert.reset();
      sqlite3_bind_int64(insert.get(), 1, record.time);
      sqlite::bind_text(insert.get(), 2, record.tenant);
      sqlite::bind_text(insert.get(), 3, record.user);
      sqlite::bind_text(insert.get(), 4, record.request_id);
      sqlite::bind_text(insert.get(), 5, record.model);
      sqlite3_bind_int64(insert.get(), 6, record.prompt_tokens);
      sqlite3_bind_int64(insert.get(), 7, record.completion_tokens);
      sqlite3_bind_int(insert.get(), 8, record.status);
      insert.step();
    }
  } catch (...) {
    sqlite3_exec(database_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  sqlite::exec(database_, "COMMIT");
}

}  // namespace chatflow::usage
