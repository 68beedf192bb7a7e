// The usage ledger in SQLite (WAL): every finished request appends a row with its prompt and
// completion tokens. Appends go through a writer thread in batches, so a request never waits on
// the disk; running totals per tenant for the current period and the holds of requests in
// flight are kept in memory. One ledger per database file per process.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "framework/storage/batch_writer.h"
#include "framework/usage/usage_ledger.h"

struct sqlite3;

namespace chatflow::usage {

class SqliteUsageLedger final : public UsageLedger {
 public:
  // The ledger of `path` (created with its table when missing); shared by everyone in this
  // process who opens the same file. Throws std::runtime_error when SQLite cannot open it, or
  // when the file cannot be written or is damaged.
  static std::shared_ptr<SqliteUsageLedger> open(const std::string& path, Period period);
  ~SqliteUsageLedger() override;  // writes what is queued, then closes

  void append(UsageRecord record) override;
  int64_t used_tokens(const std::string& tenant) override;
  // Holds are counted per tenant in this process: `hold` names nothing here.
  bool reserve(const std::string& tenant, const std::string& hold, int64_t tokens,
               std::optional<int64_t> allowance) override;
  int64_t reserved_tokens(const std::string& tenant) override;
  void settle(const std::string& tenant, const std::string& hold, int64_t reserved,
              UsageRecord record) override;
  int64_t lost_rows() override;
  int64_t last_failure_time() override;
  std::vector<TenantUsage> report(const std::string& tenant) override;
  void flush() override;

 private:
  SqliteUsageLedger(const std::string& path, Period period);
  void write_batch(const std::deque<UsageRecord>& batch);
  void roll_period_locked();

  std::string path_;
  sqlite3* database_ = nullptr;
  std::mutex database_mutex_;

  std::mutex mutex_;
  std::map<std::string, int64_t> totals_;    // current period
  std::map<std::string, int64_t> reserved_;  // held by requests in flight
  int64_t totals_period_start_ = 0;
  bool totals_loaded_ = false;
  std::unique_ptr<storage::BatchWriter<UsageRecord>> writer_;
};

}  // namespace chatflow::usage
