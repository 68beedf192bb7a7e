// A per-tenant token ledger: every finished request records its prompt and completion tokens,
// and a request about to run first holds what it may use of its tenant's allowance, so that
// concurrent requests can never together spend more than it. Two kinds: SQLite
// (sqlite_usage_ledger.h: one process, totals in memory) and PostgreSQL
// (postgres_usage_ledger.h: any number of replicas sharing one server).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::usage {

enum class Period { day, month, total };
std::optional<Period> period_from_name(const std::string& name);
std::string_view to_string(Period period);
// Unix seconds at which the period holding `now` began, in UTC (0 for `total`).
int64_t period_start(Period period, int64_t now);

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

// A name for one request's hold on its tenant's allowance, unique across replicas.
std::string new_hold_id();

class UsageLedger {
 public:
  virtual ~UsageLedger() = default;

  virtual void append(UsageRecord record) = 0;
  // Tokens (prompt + completion) `tenant` used in the current period, rows not yet written
  // included.
  virtual int64_t used_tokens(const std::string& tenant) = 0;

  // Adds `tokens` of `tenant`'s allowance (none: unlimited) to the hold `hold` (new_hold_id(),
  // one per request) for a request about to run: false (nothing added) when what is used plus
  // what requests in flight hold plus `tokens` would pass it. So concurrent requests can never
  // together spend more than the allowance.
  virtual bool reserve(const std::string& tenant, const std::string& hold, int64_t tokens,
                       std::optional<int64_t> allowance) = 0;
  // Tokens `tenant`'s requests in flight hold.
  virtual int64_t reserved_tokens(const std::string& tenant) = 0;
  // The request is over: lets go of the hold (`reserved` tokens) and records what it really
  // used (a record with no tokens writes no row).
  virtual void settle(const std::string& tenant, const std::string& hold, int64_t reserved,
                      UsageRecord record) = 0;

  // Rows that could not be written since the ledger opened, and when the last such failure was
  // (Unix seconds, 0 if never).
  virtual int64_t lost_rows() = 0;
  virtual int64_t last_failure_time() = 0;
  // Per tenant (or one tenant) for the current period, read from the database after what is
  // queued is written.
  virtual std::vector<TenantUsage> report(const std::string& tenant) = 0;
  // Blocks until every appended row is in the database (or counted lost).
  virtual void flush() = 0;

  Period period() const { return period_; }
  // Unix seconds at which the current period began (0 for `total`).
  int64_t period_start() const;

 protected:
  explicit UsageLedger(Period period) : period_(period) {}

 private:
  Period period_;
};

}  // namespace chatflow::usage
