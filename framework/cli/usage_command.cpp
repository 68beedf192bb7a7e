// chatflow usage: what tenants used this period, from a quota stage's SQLite ledger.
#include <filesystem>
#include <iostream>

#include "framework/cli/commands.h"
#include "framework/usage/usage_ledger.h"

namespace chatflow::cli {

int usage_command(const UsageOptions& options) {
  std::error_code error;
  if (!std::filesystem::exists(options.database, error)) {
    std::cerr << "chatflow: " << options.database
              << " does not exist (the quota stage's 'database' creates it)\n";
    return 1;
  }
  try {
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
  } catch (const std::exception& failure) {
    std::cerr << "chatflow: " << failure.what() << "\n";
    return 1;
  }
}

}  // namespace chatflow::cli
