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

}  // namespace
}  // namespace chatflow::limits
