#include "framework/usage/sqlite_usage_ledger.h"

#include <filesystem>
#include <unistd.h>

#include <gtest/gtest.h>

#include "support/temp_model.h"

namespace chatflow::usage {
namespace {

TEST(UsageLedger, AppendsTotalsAndPersists) {
  std::string path = testing::temp_path("ledger-" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  {
    auto ledger = SqliteUsageLedger::open(path, Period::month);
    ledger->append({0, "acme", "alice", "r1", "m", 10, 20, 200});
    ledger->append({0, "acme", "bob", "r2", "m", 5, 0, 499});
    ledger->append({0, "globex", "carol", "r3", "m", 7, 8, 200});
    EXPECT_EQ(ledger->used_tokens("acme"), 35);
    EXPECT_EQ(ledger->used_tokens("nobody"), 0);
    auto rows = ledger->report("");
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].tenant, "acme");
    EXPECT_EQ(rows[0].requests, 2);
    EXPECT_EQ(rows[0].prompt_tokens, 15);
    EXPECT_EQ(rows[0].completion_tokens, 20);
    EXPECT_EQ(ledger->report("globex").at(0).completion_tokens, 8);
    // An old row (last year) does not count in this month.
    ledger->append({ledger->period_start() - 86400 * 400, "acme", "", "old", "m", 1000, 0, 200});
  }
  {
    auto reopened = SqliteUsageLedger::open(path, Period::month);
    EXPECT_EQ(reopened->used_tokens("acme"), 35) << "totals come back from the file";
  }
  auto all_time = SqliteUsageLedger::open(path, Period::total);
  auto rows = all_time->report("acme");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].requests, 3);
  EXPECT_EQ(rows[0].prompt_tokens, 1015);
}

}  // namespace
}  // namespace chatflow::usage
