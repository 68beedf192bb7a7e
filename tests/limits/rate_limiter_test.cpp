#include "framework/limits/rate_limiter.h"

#include <gtest/gtest.h>

namespace chatflow::limits {
namespace {

TEST(RateLimiter, BucketsEmptyRefillAndSettle) {
  InMemoryRateLimiter limiter(60);
  auto now = InMemoryRateLimiter::Clock::now();
  limiter.set_clock([&] { return now; });
  std::vector<Claim> one = {{"t:requests", 3, 1}, {"t:tokens", 600, 100}};
  for (int i = 0; i < 3; ++i) {
    Reservation granted = limiter.reserve(one);
    ASSERT_TRUE(granted.granted) << i;
    EXPECT_EQ(granted.states[0].remaining, 2 - i);
    EXPECT_EQ(granted.states[1].remaining, 500 - 100 * i);
  }
  Reservation refused = limiter.reserve(one);
  EXPECT_FALSE(refused.granted);
  EXPECT_NEAR(refused.retry_after_s, 20, 1e-6);  // one request refills in 60 / 3 s
  EXPECT_EQ(refused.states[1].remaining, 300) << "a refused reservation takes nothing";

  now += std::chrono::seconds(20);
  EXPECT_TRUE(limiter.reserve(one).granted);

  // Settling gives back what was not used, never above the limit.
  limiter.refund("t:tokens", 600, 80);
  Reservation after = limiter.reserve({{"t:tokens", 600, 0}});
  // 300 left, 20 s x 10 tokens/s refilled, 100 taken, 80 given back.
  EXPECT_NEAR(after.states[0].remaining, 300 + 200 - 100 + 80, 1e-6);
  limiter.refund("t:tokens", 600, 100000);
  EXPECT_EQ(limiter.reserve({{"t:tokens", 600, 0}}).states[0].remaining, 600);
}

TEST(RateLimiter, AllOrNothingAndNever) {
  InMemoryRateLimiter limiter(60);
  std::vector<Claim> claims = {{"a", 10, 1}, {"b", 100, 150}};
  Reservation result = limiter.reserve(claims);
  EXPECT_FALSE(result.granted);
  EXPECT_TRUE(result.never) << "150 tokens can never fit a 100-token bucket";
  EXPECT_EQ(result.states[0].remaining, 10) << "the other bucket was not charged";
  EXPECT_TRUE(limiter.reserve({{"unlimited", 0, 1e9}}).granted);
}

// One bucket per client address: 100,000 addresses once each must not stay in memory after
// their buckets have refilled (a full bucket is the same as none).
TEST(RateLimiter, RefilledBucketsAreDroppedSoDistinctCallersDoNotAccumulate) {
  InMemoryRateLimiter limiter(60);
  auto now = InMemoryRateLimiter::Clock::now();
  limiter.set_clock([&] { return now; });
  for (int i = 0; i < 100'000; ++i) {
    std::string address = "address:10." + std::to_string(i / 65536) + "." +
                          std::to_string(i / 256 % 256) + "." + std::to_string(i % 256);
    ASSERT_TRUE(limiter.reserve({{address + ":requests", 5, 1}}).granted);
    now += std::chrono::microseconds(100);  // 10 s for all of them
  }
  // Within the window, while their buckets refill, they are held (else their limits would
  // reset); a count well below 100,000 here means buckets were dropped before they had refilled.
  EXPECT_GT(limiter.bucket_count(), 5'000u);
  now += std::chrono::seconds(61);
  ASSERT_TRUE(limiter.reserve({{"address:192.0.2.1:requests", 5, 1}}).granted);
  EXPECT_LE(limiter.bucket_count(), 1u) << "refilled buckets were kept";
}

TEST(RateLimiter, ABucketStillRefillingSurvivesASweepWithItsLevel) {
  InMemoryRateLimiter limiter(60);
  auto now = InMemoryRateLimiter::Clock::now();
  limiter.set_clock([&] { return now; });
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(limiter.reserve({{"tenant:busy", 3, 1}}).granted);
  // A burst of other callers forces sweeps while "tenant:busy" is empty.
  for (int i = 0; i < 5'000; ++i)
    ASSERT_TRUE(limiter.reserve({{"address:" + std::to_string(i), 1000, 1}}).granted);
  now += std::chrono::seconds(61);  // everyone refilled, and a sweep is due
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(limiter.reserve({{"tenant:busy", 3, 1}}).granted);
  now += std::chrono::seconds(1);
  EXPECT_LE(limiter.bucket_count(), 1u);
  Reservation refused = limiter.reserve({{"tenant:busy", 3, 1}});
  EXPECT_FALSE(refused.granted) << "a sweep gave an empty bucket back full";
  EXPECT_NEAR(refused.retry_after_s, 19, 1e-6);
}

TEST(RateLimiter, PastTheBoundTheLeastRecentlyUsedBucketsGo) {
  InMemoryRateLimiter limiter(60, /*max_buckets=*/2'000);
  auto now = InMemoryRateLimiter::Clock::now();
  limiter.set_clock([&] { return now; });
  for (int i = 0; i < 10'000; ++i) {
    ASSERT_TRUE(limiter.reserve({{"address:" + std::to_string(i), 5, 5}}).granted);
    now += std::chrono::microseconds(10);
    ASSERT_LE(limiter.bucket_count(), 2'001u) << i;
  }
  // The newest callers keep their empty buckets.
  EXPECT_FALSE(limiter.reserve({{"address:9999", 5, 1}}).granted);
}

}  // namespace
}  // namespace chatflow::limits
