// The usage ledger in PostgreSQL, shared by every replica that points at the same database.
//
// A hold is a row of usage_reservations (its tokens and an expires_at). reserve() runs one
// transaction under a per-tenant advisory lock: it removes the tenant's expired holds, reads what
// the tenant used this period (usage_daily) and what its live holds keep, and adds the new hold
// only if all of it stays within the allowance. So requests on any number of replicas can never
// together pass a hard quota. settle() deletes the hold and records the usage in one
// transaction (on a writer thread, so a finished request never waits on the server; until it
// commits the hold still counts, which errs on the safe side). A replica killed mid-request
// leaves its hold behind only until it expires. While the server cannot be reached, settlements
// wait in a bounded buffer and are written once it answers (storage/batch_writer.h).
//
// Tables (migrations of the component "usage"): usage_records (one row per request, unique by
// hold, so a settle retried after a lost COMMIT is not counted twice), usage_daily (per tenant
// and UTC day: the period totals read on every reserve) and usage_reservations.
#pragma once

#include <chrono>
#include <memory>

#include "framework/storage/batch_writer.h"
#include "framework/storage/postgres_client.h"
#include "framework/usage/usage_ledger.h"

namespace chatflow::usage {

struct PostgresLedgerOptions {
  Period period = Period::month;
  // How long a hold counts when its request never settles (its replica died).
  std::chrono::seconds reservation_ttl{600};
  // How often the writer removes every tenant's expired holds when it has nothing else to do.
  std::chrono::seconds sweep_interval{60};
  // Settlements kept while the server cannot be reached (written, in order, once it answers);
  // past this many, new ones are dropped and counted in lost_rows().
  size_t write_buffer_rows = 100'000;
};

class PostgresUsageLedger final : public UsageLedger {
 public:
  // Applies the ledger's migrations; throws postgres::PostgresError when the server fails them.
  PostgresUsageLedger(std::shared_ptr<postgres::Client> client, PostgresLedgerOptions options);
  ~PostgresUsageLedger() override;  // writes what is queued, then stops

  void append(UsageRecord record) override;
  int64_t used_tokens(const std::string& tenant) override;
  // Throws postgres::PostgresError when the server cannot be asked: a quota that cannot be
  // checked is not passed.
  bool reserve(const std::string& tenant, const std::string& hold, int64_t tokens,
               std::optional<int64_t> allowance) override;
  int64_t reserved_tokens(const std::string& tenant) override;
  void settle(const std::string& tenant, const std::string& hold, int64_t reserved,
              UsageRecord record) override;
  int64_t lost_rows() override;
  int64_t last_failure_time() override;
  std::vector<TenantUsage> report(const std::string& tenant) override;
  void flush() override;

  // Removes every expired hold now; returns how many.
  int64_t expire_holds();

  static const std::vector<postgres::Migration>& migrations();

 private:
  struct Settlement {
    std::string hold;
    UsageRecord record;
  };
  void write_batch(const std::deque<Settlement>& batch);

  std::shared_ptr<postgres::Client> client_;
  PostgresLedgerOptions options_;
  std::unique_ptr<storage::BatchWriter<Settlement>> writer_;
};

}  // namespace chatflow::usage
