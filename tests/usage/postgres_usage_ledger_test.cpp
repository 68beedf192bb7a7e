#include "framework/usage/postgres_usage_ledger.h"

#include <atomic>
#include <ctime>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/postgres_server.h"

namespace chatflow::usage {
namespace {

using postgres::Client;
using postgres::ClientOptions;

class PostgresLedger : public testing::PostgresDatabaseTest {
 protected:
  // One "replica": its own pool and ledger over the shared database.
  std::unique_ptr<PostgresUsageLedger> replica(Period period = Period::month,
                                               std::chrono::seconds ttl = std::chrono::seconds(600),
                                               size_t write_buffer_rows = 100'000) {
    ClientOptions options;
    options.url = url_;
    options.pool_size = 8;
    options.connect_timeout_s = 2;
    PostgresLedgerOptions ledger;
    ledger.period = period;
    ledger.reservation_ttl = ttl;
    ledger.write_buffer_rows = write_buffer_rows;
    return std::make_unique<PostgresUsageLedger>(std::make_shared<Client>(options), ledger);
  }
  // The usage rows the database holds, read on a connection of its own.
  int64_t recorded_rows() {
    ClientOptions options;
    options.url = url_;
    return Client(options).exec("SELECT count(*) FROM usage_records").integer(0, 0);
  }
  // Polls until the database holds `rows` usage rows (the writer's backoff is at most 5 s).
  bool rows_arrive(int64_t rows) {
    for (int tries = 0; tries < 300; ++tries) {
      if (recorded_rows() == rows) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
};

UsageRecord used(const std::string& tenant, int64_t prompt, int64_t completion, int64_t time = 0) {
  return {time, tenant, "alice", "request", "test-model", prompt, completion, 200};
}

// 32 requests on two replicas at once against an allowance for ten of them: exactly ten hold.
TEST_F(PostgresLedger, ConcurrentReservationsOnTwoReplicasNeverPassTheAllowance) {
  auto first = replica();
  auto second = replica();
  std::atomic<int> held{0};
  std::vector<std::thread> requests;
  std::vector<std::string> holds(32);
  for (int i = 0; i < 32; ++i) {
    requests.emplace_back([&, i] {
      PostgresUsageLedger& ledger = i % 2 ? *first : *second;
      holds[i] = new_hold_id();
      if (ledger.reserve("acme", holds[i], 10, 100)) ++held;
    });
  }
  for (auto& request : requests)
    request.join();
  EXPECT_EQ(held.load(), 10);
  EXPECT_EQ(first->reserved_tokens("acme"), 100);
  EXPECT_EQ(second->reserved_tokens("acme"), 100);
  EXPECT_FALSE(second->reserve("acme", new_hold_id(), 1, 100));
  EXPECT_TRUE(second->reserve("globex", new_hold_id(), 100, 100)) << "tenants are apart";
}

TEST_F(PostgresLedger, SettlingRecordsTheRealCountAndFreesTheRestOfTheHold) {
  auto first = replica();
  auto second = replica();
  std::string hold = new_hold_id();
  ASSERT_TRUE(first->reserve("acme", hold, 90, 100));
  EXPECT_FALSE(second->reserve("acme", new_hold_id(), 20, 100));
  first->settle("acme", hold, 90, used("acme", 6, 4));
  first->flush();
  EXPECT_EQ(second->used_tokens("acme"), 10);
  EXPECT_EQ(second->reserved_tokens("acme"), 0);
  EXPECT_TRUE(second->reserve("acme", new_hold_id(), 90, 100)) << "10 used + 90 fits in 100";
  EXPECT_FALSE(second->reserve("acme", new_hold_id(), 1, 100));
  std::vector<TenantUsage> report = second->report("acme");
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].requests, 1);
  EXPECT_EQ(report[0].prompt_tokens, 6);
  EXPECT_EQ(report[0].completion_tokens, 4);
}

TEST_F(PostgresLedger, AHoldGrowsWhenItsRequestSpendsAside) {
  auto ledger = replica();
  std::string hold = new_hold_id();
  ASSERT_TRUE(ledger->reserve("acme", hold, 40, 100));
  ASSERT_TRUE(ledger->reserve("acme", hold, 50, 100));
  EXPECT_EQ(ledger->reserved_tokens("acme"), 90);
  EXPECT_FALSE(ledger->reserve("acme", hold, 20, 100));
  EXPECT_EQ(ledger->reserved_tokens("acme"), 90) << "a refused step adds nothing";
  ledger->settle("acme", hold, 90, used("acme", 30, 30));
  ledger->flush();
  EXPECT_EQ(ledger->reserved_tokens("acme"), 0) << "the whole hold goes with one settle";
  EXPECT_EQ(ledger->used_tokens("acme"), 60);
}

// A replica killed mid-request never settles: its hold stops counting when it expires, and is
// removed.
TEST_F(PostgresLedger, AnAbandonedHoldExpires) {
  {
    auto killed = replica(Period::month, std::chrono::seconds(1));
    ASSERT_TRUE(killed->reserve("acme", new_hold_id(), 100, 100));
  }
  auto survivor = replica(Period::month, std::chrono::seconds(1));
  EXPECT_FALSE(survivor->reserve("acme", new_hold_id(), 1, 100));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(survivor->reserved_tokens("acme"), 0);
  EXPECT_TRUE(survivor->reserve("acme", new_hold_id(), 100, 100));
  ClientOptions options;
  options.url = url_;
  Client client(options);
  EXPECT_EQ(client.exec("SELECT count(*) FROM usage_reservations").integer(0, 0), 1)
      << "the expired hold was removed, the new one kept";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(survivor->expire_holds(), 1);
  EXPECT_EQ(client.exec("SELECT count(*) FROM usage_reservations").integer(0, 0), 0);
}

TEST_F(PostgresLedger, APeriodCountsOnlyItsOwnDays) {
  int64_t two_days_ago = static_cast<int64_t>(std::time(nullptr)) - 2 * 86400;
  {
    auto ledger = replica(Period::total);
    ledger->append(used("acme", 100, 0, two_days_ago));
    ledger->append(used("acme", 5, 5));
    ledger->flush();
    EXPECT_EQ(ledger->used_tokens("acme"), 110);
  }
  auto by_day = replica(Period::day);
  EXPECT_EQ(by_day->used_tokens("acme"), 10);
  EXPECT_TRUE(by_day->reserve("acme", new_hold_id(), 90, 100));
  std::vector<TenantUsage> today = by_day->report("");
  ASSERT_EQ(today.size(), 1u);
  EXPECT_EQ(today[0].requests, 1);
}

TEST_F(PostgresLedger, UnlimitedTenantsHoldNothingButAreRecorded) {
  auto ledger = replica();
  std::string hold = new_hold_id();
  EXPECT_TRUE(ledger->reserve("acme", hold, 1'000'000, std::nullopt));
  EXPECT_EQ(ledger->reserved_tokens("acme"), 0);
  ledger->settle("acme", hold, 0, used("acme", 3, 4));
  ledger->settle("acme", new_hold_id(), 0, used("acme", 0, 0));  // writes no row
  std::vector<TenantUsage> report = ledger->report("");
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0].requests, 1);
  EXPECT_EQ(report[0].prompt_tokens + report[0].completion_tokens, 7);
}

TEST_F(PostgresLedger, ATenantNameThatIsNotValidTextStillHasItsUsageCounted) {
  auto ledger = replica();
  std::string odd("a\0\xff", 3);
  ASSERT_TRUE(ledger->reserve(odd, new_hold_id(), 50, 60));
  ledger->append(used(odd, 5, 0));
  ledger->flush();
  EXPECT_EQ(ledger->lost_rows(), 0);
  EXPECT_EQ(ledger->used_tokens(odd), 5);
  EXPECT_FALSE(ledger->reserve(odd, new_hold_id(), 10, 60));
}

TEST_F(PostgresLedger, WhatCannotBeWrittenIsCountedAsLost) {
  auto ledger = replica();
  ClientOptions options;
  options.url = url_;
  Client client(options);
  client.exec("ALTER TABLE usage_records ADD CONSTRAINT small CHECK (prompt_tokens < 1000)");
  ledger->append(used("acme", 5000, 0));
  ledger->flush();
  EXPECT_EQ(ledger->lost_rows(), 1);
  EXPECT_GT(ledger->last_failure_time(), 0);
  EXPECT_EQ(ledger->used_tokens("acme"), 0);
}

// The outside probe's defect: with PostgreSQL down, settlements of unlimited tenants (which need
// no round trip to be served) were dropped after a few quick retries. They wait and arrive.
TEST_F(PostgresLedger, SettlementsMadeWhileTheServerIsDownArriveWhenItIsBack) {
  auto ledger = replica();
  ledger->settle("acme", new_hold_id(), 0, used("acme", 1, 1));
  ledger->flush();
  ASSERT_EQ(recorded_rows(), 1);
  ::testing::internal::CaptureStderr();
  server_->pause();
  for (int i = 0; i < 40; ++i)
    ledger->settle("acme", new_hold_id(), 0, used("acme", 2, 3));
  // Longer than the few seconds of retries that used to be all a batch got.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_GT(ledger->last_failure_time(), 0);
  EXPECT_EQ(ledger->lost_rows(), 0);
  server_->resume();
  EXPECT_TRUE(rows_arrive(41)) << recorded_rows() << " rows";
  std::string messages = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ledger->lost_rows(), 0);
  EXPECT_EQ(ledger->used_tokens("acme"), 2 + 40 * 5);
  EXPECT_NE(messages.find("rows are kept and written when it answers"), std::string::npos)
      << messages;
}

TEST_F(PostgresLedger, PastTheWriteBufferSettlementsAreDroppedAndCounted) {
  auto ledger = replica(Period::month, std::chrono::seconds(600), /*write_buffer_rows=*/10);
  ::testing::internal::CaptureStderr();
  server_->pause();
  for (int i = 0; i < 25; ++i)
    ledger->settle("acme", new_hold_id(), 0, used("acme", 1, 0));
  EXPECT_EQ(ledger->lost_rows(), 15);
  EXPECT_GT(ledger->last_failure_time(), 0);
  server_->resume();
  EXPECT_TRUE(rows_arrive(10)) << recorded_rows() << " rows";
  std::string messages = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ledger->lost_rows(), 15) << "the ten that waited were written";
  EXPECT_NE(messages.find("10 rows already wait to be written; new rows are dropped"),
            std::string::npos)
      << messages;
}

}  // namespace
}  // namespace chatflow::usage
