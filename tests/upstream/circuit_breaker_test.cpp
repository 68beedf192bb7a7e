#include "framework/upstream/circuit_breaker.h"

#include <gtest/gtest.h>

namespace chatflow::upstream {
namespace {

using State = CircuitBreaker::State;
using std::chrono::milliseconds;

CircuitBreaker breaker_of(int failures, int cooldown_ms) {
  return CircuitBreaker({failures, milliseconds(cooldown_ms)});
}

TEST(CircuitBreaker, OpensAfterTheThresholdOfFailuresInARow) {
  auto breaker = breaker_of(3, 1000);
  auto now = CircuitBreaker::Clock::now();
  breaker.record_failure(now);
  breaker.record_failure(now);
  EXPECT_EQ(breaker.state(now), State::closed);
  EXPECT_TRUE(breaker.can_admit(now));
  breaker.record_failure(now);
  EXPECT_EQ(breaker.state(now), State::open);
  EXPECT_FALSE(breaker.can_admit(now));
}

TEST(CircuitBreaker, ASuccessResetsTheCount) {
  auto breaker = breaker_of(3, 1000);
  auto now = CircuitBreaker::Clock::now();
  breaker.record_failure(now);
  breaker.record_failure(now);
  breaker.record_success();
  breaker.record_failure(now);
  breaker.record_failure(now);
  EXPECT_EQ(breaker.state(now), State::closed);
  EXPECT_EQ(breaker.consecutive_failures(), 2);
}

TEST(CircuitBreaker, HalfOpenAfterTheCooldownAdmitsOneTrial) {
  auto breaker = breaker_of(1, 1000);
  auto now = CircuitBreaker::Clock::now();
  breaker.record_failure(now);
  EXPECT_FALSE(breaker.can_admit(now + milliseconds(999)));
  auto later = now + milliseconds(1000);
  EXPECT_EQ(breaker.state(later), State::half_open);
  ASSERT_TRUE(breaker.can_admit(later));
  breaker.admitted(later);
  EXPECT_FALSE(breaker.can_admit(later)) << "one trial at a time";
  breaker.record_success();
  EXPECT_EQ(breaker.state(later), State::closed);
  EXPECT_TRUE(breaker.can_admit(later));
}

TEST(CircuitBreaker, AFailedTrialOpensItForAnotherCooldown) {
  auto breaker = breaker_of(5, 1000);
  auto now = CircuitBreaker::Clock::now();
  for (int i = 0; i < 5; ++i)
    breaker.record_failure(now);
  auto trial = now + milliseconds(1500);
  breaker.admitted(trial);
  breaker.record_failure(trial);
  EXPECT_EQ(breaker.state(trial + milliseconds(999)), State::open)
      << "the cool-down starts again at the failed trial";
  EXPECT_EQ(breaker.state(trial + milliseconds(1000)), State::half_open);
}

TEST(CircuitBreaker, AnAbandonedTrialLetsAnotherGo) {
  auto breaker = breaker_of(1, 10);
  auto now = CircuitBreaker::Clock::now();
  breaker.record_failure(now);
  auto later = now + milliseconds(10);
  breaker.admitted(later);
  EXPECT_FALSE(breaker.can_admit(later));
  breaker.record_abandoned();
  EXPECT_TRUE(breaker.can_admit(later));
  EXPECT_EQ(breaker.state(later), State::half_open) << "a cancelled trial proves nothing";
}

}  // namespace
}  // namespace chatflow::upstream
