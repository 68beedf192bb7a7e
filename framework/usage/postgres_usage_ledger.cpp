#include "framework/usage/postgres_usage_ledger.h"

#include <algorithm>
#include <ctime>

#include "framework/text/utf8.h"

namespace chatflow::usage {
namespace {

using postgres::Connection;
using postgres::Param;

// The first key of the per-tenant advisory locks (the second is the tenant's hash): keeps them
// apart from any other two-key advisory lock in the same database.
constexpr int64_t kTenantLockSpace = 0x75736167;  // "usag"
constexpr int64_t kSecondsPerDay = 86400;

int64_t unix_now() {
  return static_cast<int64_t>(std::time(nullptr));
}

// PostgreSQL text holds valid UTF-8 without U+0000; a tenant or model name from outside may not
// be either, and must not cost the row.
std::string stored_text(std::string_view value) {
  std::string repaired = text::repair(value);
  std::string out;
  out.reserve(repaired.size());
  for (char byte : repaired) {
    if (byte == '\0') {
      text::append(out, text::kReplacement);
    } else {
      out.push_back(byte);
    }
  }
  return out;
}

// Serialises every change to one tenant's allowance until the transaction ends.
void lock_tenant(Connection& connection, const std::string& tenant) {
  connection.exec("SELECT pg_advisory_xact_lock($1::integer, hashtext($2))",
                  {Param::integer(kTenantLockSpace), Param::text(tenant)},
                  "locking the tenant's allowance");
}

}  // namespace

const std::vector<postgres::Migration>& PostgresUsageLedger::migrations() {
  static const std::vector<postgres::Migration> all = {
      {1,
       "usage records, daily totals and reservations",
       {"CREATE TABLE usage_records ("
        "  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        "  hold_id TEXT NOT NULL UNIQUE,"
        "  time BIGINT NOT NULL,"
        "  tenant TEXT NOT NULL,"
        "  user_name TEXT NOT NULL,"
        "  request_id TEXT NOT NULL,"
        "  model TEXT NOT NULL,"
        "  prompt_tokens BIGINT NOT NULL,"
        "  completion_tokens BIGINT NOT NULL,"
        "  status INTEGER NOT NULL)",
        "CREATE INDEX usage_records_tenant_time ON usage_records (tenant, time)",
        // Totals per UTC day: a day's, a month's or all time's usage is a sum of at most a few
        // hundred rows, however many requests there were.
        "CREATE TABLE usage_daily ("
        "  tenant TEXT NOT NULL,"
        "  day BIGINT NOT NULL,"
        "  requests BIGINT NOT NULL,"
        "  prompt_tokens BIGINT NOT NULL,"
        "  completion_tokens BIGINT NOT NULL,"
        "  PRIMARY KEY (tenant, day))",
        "CREATE TABLE usage_reservations ("
        "  hold_id TEXT PRIMARY KEY,"
        "  tenant TEXT NOT NULL,"
        "  tokens BIGINT NOT NULL,"
        "  expires_at TIMESTAMPTZ NOT NULL)",
        "CREATE INDEX usage_reservations_tenant ON usage_reservations (tenant)",
        "CREATE INDEX usage_reservations_expiry ON usage_reservations (expires_at)"}},
  };
  return all;
}

PostgresUsageLedger::PostgresUsageLedger(std::shared_ptr<postgres::Client> client,
                                         PostgresLedgerOptions options)
    : UsageLedger(options.period), client_(std::move(client)), options_(options) {
  client_->migrate("usage", migrations());
  // Busy or not, the writer also removes the holds of tenants that send nothing more.
  storage::BatchWriterOptions writing;
  writing.max_buffered = options_.write_buffer_rows;
  // Unreachable, restarting, shutting down: the rows wait for it. Settlements are unique by hold,
  // so a batch whose COMMIT was lost may be written again.
  writing.is_transient = [](const std::exception& error) {
    auto* failure = dynamic_cast<const postgres::PostgresError*>(&error);
    return failure && failure->connection_failed();
  };
  writing.upkeep = [this] { expire_holds(); };
  writing.upkeep_interval =
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.sweep_interval);
  writer_ = std::make_unique<storage::BatchWriter<Settlement>>(
      "usage ledger " + client_->server(),
      [this](const std::deque<Settlement>& batch) { write_batch(batch); }, std::move(writing));
}

PostgresUsageLedger::~PostgresUsageLedger() {
  writer_.reset();  // writes what is queued
}

void PostgresUsageLedger::append(UsageRecord record) {
  settle(record.tenant, new_hold_id(), 0, std::move(record));
}

int64_t PostgresUsageLedger::used_tokens(const std::string& tenant) {
  postgres::Result used = client_->exec(
      "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM usage_daily WHERE tenant "
      "= $1 AND day >= $2",
      {Param::text(stored_text(tenant)), Param::integer(period_start())},
      "reading the tenant's usage");
  return used.integer(0, 0);
}

bool PostgresUsageLedger::reserve(const std::string& tenant, const std::string& hold,
                                  int64_t tokens, std::optional<int64_t> allowance) {
  // Without an allowance nothing is held: no round trip for unlimited tenants.
  if (!allowance) return true;
  std::string key = stored_text(tenant);
  int64_t start = period_start();
  return client_->transaction([&](Connection& connection) {
    lock_tenant(connection, key);
    // One statement, one snapshot: a settlement committing meanwhile is seen either as its hold
    // or as its usage, never as neither; the hold is added only if it fits. (The request's own
    // hold is not expired here: the statement could not both delete and extend it.)
    postgres::Result standing = connection.exec(
        "WITH expired AS (DELETE FROM usage_reservations WHERE tenant = $1 AND expires_at < now() "
        "AND hold_id <> $3), standing AS (SELECT (SELECT COALESCE(SUM(prompt_tokens + "
        "completion_tokens), 0) FROM usage_daily WHERE tenant = $1 AND day >= $2) AS used, "
        "(SELECT COALESCE(SUM(tokens), 0) FROM usage_reservations WHERE tenant = $1 AND "
        "expires_at >= now()) AS held), added AS (INSERT INTO usage_reservations (hold_id, tenant, "
        "tokens, expires_at) SELECT $3, $1, $4::bigint, now() + make_interval(secs => "
        "$6::double precision) FROM standing WHERE used + held + $4::bigint <= $5::bigint ON "
        "CONFLICT (hold_id) DO UPDATE SET tokens = usage_reservations.tokens + EXCLUDED.tokens, "
        "expires_at = EXCLUDED.expires_at RETURNING 1) SELECT (SELECT count(*) FROM added) FROM "
        "standing",
        {Param::text(key), Param::integer(start), Param::text(hold), Param::integer(tokens),
         Param::integer(*allowance), Param::integer(options_.reservation_ttl.count())},
        "holding tokens of the tenant's allowance");
    return standing.integer(0, 0) == 1;
  });
}

int64_t PostgresUsageLedger::reserved_tokens(const std::string& tenant) {
  postgres::Result held = client_->exec(
      "SELECT COALESCE(SUM(tokens), 0) FROM usage_reservations WHERE tenant = $1 AND expires_at "
      ">= now()",
      {Param::text(stored_text(tenant))}, "reading the tenant's holds");
  return held.integer(0, 0);
}

void PostgresUsageLedger::settle(const std::string&, const std::string& hold, int64_t,
                                 UsageRecord record) {
  if (record.time == 0) record.time = unix_now();
  writer_->push({hold, std::move(record)});
}

int64_t PostgresUsageLedger::lost_rows() {
  return writer_->lost();
}

int64_t PostgresUsageLedger::last_failure_time() {
  return writer_->last_failure_time();
}

void PostgresUsageLedger::flush() {
  writer_->flush();
}

std::vector<TenantUsage> PostgresUsageLedger::report(const std::string& tenant) {
  flush();
  std::vector<Param> params = {Param::integer(period_start())};
  if (!tenant.empty()) params.push_back(Param::text(stored_text(tenant)));
  postgres::Result rows = client_->exec(
      tenant.empty() ? "SELECT tenant, SUM(requests), SUM(prompt_tokens), SUM(completion_tokens) "
                       "FROM usage_daily WHERE day >= $1 GROUP BY tenant ORDER BY tenant"
                     : "SELECT tenant, SUM(requests), SUM(prompt_tokens), SUM(completion_tokens) "
                       "FROM usage_daily WHERE day >= $1 AND tenant = $2 GROUP BY tenant",
      params, "reading the usage report");
  std::vector<TenantUsage> report;
  for (int row = 0; row < rows.rows(); ++row) {
    report.push_back(
        {rows.text(row, 0), rows.integer(row, 1), rows.integer(row, 2), rows.integer(row, 3)});
  }
  return report;
}

int64_t PostgresUsageLedger::expire_holds() {
  return client_
      ->exec("DELETE FROM usage_reservations WHERE expires_at < now()", {},
             "removing expired holds")
      .changed_rows();
}

void PostgresUsageLedger::write_batch(const std::deque<Settlement>& batch) {
  // Tenants in one order in every batch: two replicas' batches then wait on each other's
  // usage_daily rows instead of deadlocking.
  std::vector<const Settlement*> ordered;
  for (const Settlement& settlement : batch)
    ordered.push_back(&settlement);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Settlement* a, const Settlement* b) {
    return a->record.tenant < b->record.tenant;
  });
  client_->transaction([&](Connection& connection) {
    for (const Settlement* settlement : ordered) {
      const UsageRecord& record = settlement->record;
      connection.exec("DELETE FROM usage_reservations WHERE hold_id = $1",
                      {Param::text(settlement->hold)}, "letting go of a hold");
      if (record.prompt_tokens == 0 && record.completion_tokens == 0) continue;
      std::string tenant = stored_text(record.tenant);
      connection.exec(
          "WITH recorded AS (INSERT INTO usage_records (hold_id, time, tenant, user_name, "
          "request_id, model, prompt_tokens, completion_tokens, status) VALUES ($1, $2, "
          "$3::text, $4, $5, $6, $7::bigint, $8::bigint, $9) ON CONFLICT (hold_id) DO NOTHING "
          "RETURNING 1) INSERT INTO usage_daily (tenant, day, requests, prompt_tokens, "
          "completion_tokens) SELECT $3::text, $10::bigint, 1, $7::bigint, $8::bigint FROM "
          "recorded ON CONFLICT (tenant, day) DO UPDATE SET requests = "
          "usage_daily.requests + 1, prompt_tokens = usage_daily.prompt_tokens + "
          "EXCLUDED.prompt_tokens, completion_tokens = usage_daily.completion_tokens + "
          "EXCLUDED.completion_tokens",
          {Param::text(settlement->hold), Param::integer(record.time), Param::text(tenant),
           Param::text(stored_text(record.user)), Param::text(stored_text(record.request_id)),
           Param::text(stored_text(record.model)), Param::integer(record.prompt_tokens),
           Param::integer(record.completion_tokens), Param::integer(record.status),
           Param::integer(record.time - record.time % kSecondsPerDay)},
          "recording a request's usage");
    }
  });
}

}  // namespace chatflow::usage
