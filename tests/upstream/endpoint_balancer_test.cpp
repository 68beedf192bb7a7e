#include "framework/upstream/endpoint_balancer.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace chatflow::upstream {
namespace {

using Outcome = EndpointBalancer::Outcome;
const CircuitBreaker::Settings kBreaker{2, std::chrono::milliseconds(1000)};

TEST(EndpointBalancer, LeastOutstandingWithoutAKey) {
  EndpointBalancer balancer(3, kBreaker);
  auto now = EndpointBalancer::Clock::now();
  std::map<size_t, int> taken;
  for (int i = 0; i < 6; ++i)
    ++taken[*balancer.acquire("", {}, now)];
  EXPECT_EQ(taken, (std::map<size_t, int>{{0, 2}, {1, 2}, {2, 2}}));
  balancer.release(1, Outcome::success, now);
  balancer.release(1, Outcome::success, now);
  EXPECT_EQ(*balancer.acquire("", {}, now), 1u) << "the endpoint with none outstanding";
  EXPECT_EQ(balancer.total_outstanding(), 5);
}

TEST(EndpointBalancer, TheSameKeyGoesToTheSameEndpoint) {
  EndpointBalancer balancer(4, kBreaker);
  auto now = EndpointBalancer::Clock::now();
  std::map<size_t, int> used;
  for (int session = 0; session < 64; ++session) {
    std::string key = "session:" + std::to_string(session);
    size_t first = *balancer.acquire(key, {}, now);
    for (int again = 0; again < 3; ++again)
      EXPECT_EQ(*balancer.acquire(key, {}, now), first) << key;
    ++used[first];
  }
  EXPECT_EQ(used.size(), 4u) << "keys spread over every endpoint";
}

TEST(EndpointBalancer, AnUnavailableEndpointMovesOnlyItsOwnKeys) {
  EndpointBalancer balancer(3, kBreaker);
  auto now = EndpointBalancer::Clock::now();
  std::map<std::string, size_t> home;
  for (int session = 0; session < 60; ++session) {
    std::string key = "s" + std::to_string(session);
    home[key] = *balancer.acquire(key, {}, now);
  }
  balancer.set_healthy(1, false);
  for (const auto& [key, endpoint] : home) {
    size_t now_at = *balancer.acquire(key, {}, now);
    if (endpoint == 1) {
      EXPECT_NE(now_at, 1u) << key;
    } else {
      EXPECT_EQ(now_at, endpoint) << key << " should stay where it was";
    }
  }
  balancer.set_healthy(1, true);
  for (const auto& [key, endpoint] : home)
    EXPECT_EQ(*balancer.acquire(key, {}, now), endpoint) << key << " comes back";
}

TEST(EndpointBalancer, ExcludedAndOpenEndpointsAreSkipped) {
  EndpointBalancer balancer(2, kBreaker);
  auto now = EndpointBalancer::Clock::now();
  EXPECT_EQ(*balancer.acquire("k", {0}, now), 1u);
  EXPECT_EQ(*balancer.acquire("k", {1}, now), 0u);
  EXPECT_FALSE(balancer.acquire("k", {0, 1}, now));
  // Two failures open endpoint 0's breaker (threshold 2).
  balancer.release(0, Outcome::failure, now);
  ASSERT_EQ(*balancer.acquire("", {1}, now), 0u);
  balancer.release(0, Outcome::failure, now);
  EXPECT_EQ(balancer.state(0, now).breaker, CircuitBreaker::State::open);
  EXPECT_FALSE(balancer.acquire("", {1}, now)) << "open breaker, endpoint 1 excluded";
  // After the cool-down one trial goes to endpoint 0.
  auto later = now + std::chrono::milliseconds(1000);
  EXPECT_EQ(*balancer.acquire("", {1}, later), 0u);
  EXPECT_FALSE(balancer.acquire("", {1}, later)) << "only one trial while half-open";
  balancer.release(0, Outcome::success, later);
  EXPECT_EQ(balancer.state(0, later).breaker, CircuitBreaker::State::closed);
}

TEST(EndpointBalancer, NoneAvailableWhenAllAreUnhealthy) {
  EndpointBalancer balancer(2, kBreaker);
  auto now = EndpointBalancer::Clock::now();
  balancer.set_healthy(0, false);
  balancer.set_healthy(1, false);
  EXPECT_FALSE(balancer.acquire("", {}, now));
  EXPECT_EQ(balancer.total_outstanding(), 0);
}

}  // namespace
}  // namespace chatflow::upstream
