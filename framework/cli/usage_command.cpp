// chatflow usage: what tenants used this period, from a quota stage's SQLite ledger.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/cli/command.h"
#include "framework/usage/usage_ledger.h"

namespace chatflow::cli {
namespace {

struct UsageOptions {
  std::string database = "var/usage.db";
  std::string tenant;  // empty: every tenant
  std::string period = "month";
};

int usage_command(const UsageOptions& options) {
  std::error_code error;
  if (!std::filesystem::exists(options.database, error)) {
    std::cerr << "chatflow: " << options.database
              << " does not exist (the quota stage's 'database' creates it)\n";
    return 1;
  }
  auto ledger =
      usage::UsageLedger::open(options.database, *usage::period_from_name(options.period));
  auto rows = ledger->report(options.tenant);
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
  command->add_option("--period", options->period, "day, month or total")
      ->check(CLI::IsMember({"day", "month", "total"}))
      ->capture_default_str();
  command->callback(
      [&selected, options] { selected = [options] { return usage_command(*options); }; });
}

}  // namespace chatflow::cli
