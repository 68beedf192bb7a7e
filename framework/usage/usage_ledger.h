// A per-tenant token ledger in SQLite (WAL): every finished request appends a row with its
// prompt and completion tokens. Appends go through a writer thread in batches, so a request never
// waits on the disk; running totals per tenant for the current period are kept in memory for the
// quota check. One ledger per database file per process.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

struct sqlite3;

namespace chatflow::usage {

enum class Period { day, month, total };
std::optional<Period> period_from_name(const std::string& name);
std::string_view to_string(Period period);

struct UsageRecord {
  int64_t time = 0;  // Unix seconds
  std::string tenant;
  std::string user;
  std::string request_id;
  std::string model;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int status = 200;
};

struct TenantUsage {
  std::string tenant;
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

class UsageLedger {
 public:
  // The ledger of `path` (created with its table when missing); shared by everyone in this
  // process who opens the same file. Throws std::runtime_error when SQLite cannot open it, or
  // when the file cannot be written or is damaged.
  static std::shared_ptr<UsageLedger> open(const std::string& path, Period period);
  ~UsageLedger();  // writes what is queued, then closes

  void append(UsageRecord record);
  // Tokens (prompt + completion) `tenant` used in the current period, queued rows included.
  int64_t used_tokens(const std::string& tenant);

  // Holds `tokens` of `tenant`'s allowance (none: unlimited) for a request about to run: false
  // (nothing held) when what is used plus what requests in flight hold plus `tokens` would pass
  // it. So concurrent requests can never together spend more than the allowance.
  bool reserve(const std::string& tenant, int64_t tokens, std::optional<int64_t> allowance);
  // Tokens `tenant`'s requests in flight hold.
  int64_t reserved_tokens(const std::string& tenant);
  // The request is over: lets go of what it held and records what it really used (a record
  // with no tokens writes no row).
  void settle(const std::string& tenant, int64_t reserved, UsageRecord record);

  // Rows that could not be written since the ledger opened, and when the last such failure was
  // (Unix seconds, 0 if never).
  int64_t lost_rows();
  int64_t last_failure_time();
  // Per tenant (or one tenant) for the current period, read from the database after the queue
  // is written.
  std::vector<TenantUsage> report(const std::string& tenant);
  // Blocks until every appended row is in the database.
  void flush();

  Period period() const { return period_; }
  // Unix seconds at which the current period began (0 for `total`).
  int64_t period_start() const;

 private:
  UsageLedger(const std::string& path, Period period);
  void run_writer();
  void write_batch(const std::vector<UsageRecord>& batch);
  void roll_period_locked();

  std::string path_;
  Period period_;
  sqlite3* database_ = nullptr;
  std::mutex database_mutex_;

  std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable written_;
  std::deque<UsageRecord> queue_;
  bool writing_ = false;
  bool stopping_ = false;
  std::map<std::string, int64_t> totals_;    // current period
  std::map<std::string, int64_t> reserved_;  // held by requests in flight
  int64_t lost_rows_ = 0;
  int64_t last_failure_time_ = 0;
  int64_t totals_period_start_ = 0;
  bool totals_loaded_ = false;
  std::thread writer_;
};

}  // namespace chatflow::usage
