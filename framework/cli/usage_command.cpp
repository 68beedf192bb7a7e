// chatflow usage: what tenants used this period, from a quota stage's ledger: its SQLite file
// or its PostgreSQL database.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/storage/postgres_client.h"
#include "framework/usage/postgres_usage_ledger.h"
#include "framework/usage/sqlite_usage_ledger.h"

namespace chatflow::cli {
namespace {

struct UsageOptions {
  std::string database = "var/usage.db";
  std::string postgres_url;  // set: the ledger is there, not in `database`
  std::string tenant;        // empty: every tenant
  std::string period = "month";
};

std::shared_ptr<usage::UsageLedger> open_ledger(const UsageOptions& options) {
  usage::Period period = *usage::period_from_name(options.period);
  if (!options.postgres_url.empty()) {
    postgres::ClientOptions client;
    client.url = options.postgres_url;
    client.pool_size = 1;
    usage::PostgresLedgerOptions ledger;
    ledger.period = period;
    return std::make_shared<usage::PostgresUsageLedger>(
        std::make_shared<postgres::Client>(std::move(client)), ledger);
  }
  std::error_code error;
  if (!std::filesystem::exists(options.database, error)) {
    std::cerr << "chatflow: " << options.database
              << " does not exist (the quota stage's 'database' creates it)\n";
    return nullptr;
  }
  return usage::SqliteUsageLedger::open(options.database, period);
}

int usage_command(const UsageOptions& options) {
  std::vector<usage::TenantUsage> rows;
  try {
    auto ledger = open_ledger(options);
    if (!ledger) return 1;
    rows = ledger->report(options.tenant);
  } catch (const std::runtime_error& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
  std::printf("%-24s %10s %15s %18s %14s\n", "tenant", "requests", "prompt_tokens",
              "completion_tokens", "total_tokens");
  for (const auto& row : rows) {
    std::printf("%-24s %10lld %15lld %18lld %14lld\n", row.tenant.c_str(),
                static_cast<long long>(row.requests), static_cast<long long>(row.prompt_tokens),
                static_cast<long long>(row.completion_tokens),
                static_cast<long long>(row.prompt_tokens + row.completion_tokens));
  }
  if (rows.empty()) std::printf("(no usage this %s)\n", options.period.c_str());
  return 0;
}

}  // namespace

void add_usage_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<UsageOptions>();
  auto* command = app.add_subcommand("usage", "Tokens used per tenant, from a quota ledger");
  command->add_option("--tenant", options->tenant, "one tenant (default: all)");
  command->add_option("--database", options->database, "the quota stage's SQLite file")
      ->capture_default_str();
  command->add_option("--postgres", options->postgres_url,
                      "the PostgreSQL URL of a quota stage's ledger (instead of --database)");
  command->add_option("--period", options->period, "day, month or total")
      ->check(CLI::IsMember({"day", "month", "total"}))
      ->capture_default_str();
  command->callback(
      [&selected, options] { selected = [options] { return usage_command(*options); }; });
}

}  // namespace chatflow::cli
