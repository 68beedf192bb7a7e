// The Redis token buckets against a real redis-server: the same answers as the in-memory
// limiter (levels, refusals, retry times, all or nothing, refunds), exact counts when several
// clients (replicas) race for one bucket, keys that expire when idle, and a failure that says
// which Redis failed.
#include "framework/limits/redis_rate_limiter.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "framework/storage/redis_client.h"
#include "support/redis_server.h"

namespace chatflow::limits {
namespace {

using testing::RedisServer;

#define SKIP_WITHOUT_REDIS()                       \
  if (RedisServer::binary().empty())               \
  GTEST_SKIP() << "redis-server is not installed " \
                  "(apt-get install redis-server)"

std::shared_ptr<redis::Client> client_for(const std::string& url) {
  redis::ClientOptions options;
  options.pool_size = 8;
  options.connect_timeout = std::chrono::milliseconds(500);
  options.command_timeout = std::chrono::milliseconds(2000);
  return std::make_shared<redis::Client>(redis::parse_url(url), options);
}

TEST(RedisRateLimiter, BucketsEmptyRefuseAndSettleLikeInMemory) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  RedisRateLimiter limiter(client_for(server.url()), "test:", 60);
  std::vector<Claim> one = {{"t:requests", 3, 1}, {"t:tokens", 600, 100}};
  for (int i = 0; i < 3; ++i) {
    Reservation granted = limiter.reserve(one);
    ASSERT_TRUE(granted.granted) << i;
    // A few milliseconds of refill at most: 3 requests and 600 tokens per minute.
    EXPECT_NEAR(granted.states[0].remaining, 2 - i, 0.01);
    EXPECT_NEAR(granted.states[1].remaining, 500 - 100 * i, 1);
    EXPECT_EQ(granted.states[0].limit, 3);
  }
  Reservation refused = limiter.reserve(one);
  EXPECT_FALSE(refused.granted);
  EXPECT_FALSE(refused.never);
  EXPECT_GT(refused.retry_after_s, 19) << "one request refills in 60 / 3 s";
  EXPECT_LE(refused.retry_after_s, 20);
  EXPECT_NEAR(refused.states[1].remaining, 300, 1) << "a refused reservation takes nothing";
  EXPECT_GT(refused.states[0].seconds_to_full, 59);

  limiter.refund("t:tokens", 600, 80);
  EXPECT_NEAR(limiter.reserve({{"t:tokens", 600, 0}}).states[0].remaining, 380, 1);
  limiter.refund({{"t:tokens", 600, 100000}});
  EXPECT_EQ(limiter.reserve({{"t:tokens", 600, 0}}).states[0].remaining, 600)
      << "a refund never fills past the limit";
  limiter.refund({{"t:tokens", 600, -250}});
  EXPECT_NEAR(limiter.reserve({{"t:tokens", 600, 0}}).states[0].remaining, 350, 1)
      << "a negative refund takes more (the prompt grew)";
}

TEST(RedisRateLimiter, AllOrNothingAndNever) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  RedisRateLimiter limiter(client_for(server.url()), "test:", 60);
  Reservation result = limiter.reserve({{"a", 10, 1}, {"b", 100, 150}});
  EXPECT_FALSE(result.granted);
  EXPECT_TRUE(result.never) << "150 tokens can never fit a 100-token bucket";
  EXPECT_EQ(result.states[0].remaining, 10) << "the other bucket was not charged";
  Reservation unlimited = limiter.reserve({{"unlimited", 0, 1e9}, {"a", 10, 1}});
  EXPECT_TRUE(unlimited.granted);
  EXPECT_EQ(unlimited.states[0].limit, 0);
  EXPECT_NEAR(unlimited.states[1].remaining, 9, 0.01)
      << "unlimited claims are skipped, not shifted";
}

TEST(RedisRateLimiter, ReplicasRacingForOneBucketGetExactlyItsLimit) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  // Two replicas: their own clients and limiters, the same keys.
  RedisRateLimiter first(client_for(server.url()), "fleet:", 3600);
  RedisRateLimiter second(client_for(server.url()), "fleet:", 3600);
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      RedisRateLimiter& limiter = t % 2 ? first : second;
      for (int i = 0; i < 20; ++i) {
        if (limiter.reserve({{"tenant:acme:requests", 50, 1}, {"user:acme/u:requests", 0, 1}})
                .granted)
          ++granted;
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(granted.load(), 50) << "160 attempts at a 50-request bucket";
}

TEST(RedisRateLimiter, KeysExpireOnceTheBucketWouldBeFull) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  auto client = client_for(server.url());
  RedisRateLimiter limiter(client, "ttl:", 2);
  ASSERT_TRUE(limiter.reserve({{"b", 5, 1}}).granted);
  int64_t ttl = client->command({"PTTL", "ttl:b"}).integer;
  EXPECT_GT(ttl, 0) << "the bucket's key never expires";
  EXPECT_LE(ttl, 3000) << "a 2 s window needs the key for 2 s (and a second of slack)";
  EXPECT_TRUE(client->command({"EXISTS", "ttl:unrelated"}).integer == 0);
}

TEST(RedisRateLimiter, UnreachableRedisIsLimiterUnavailableNamingIt) {
  int port = testing::free_port();
  RedisRateLimiter limiter(client_for("redis://127.0.0.1:" + std::to_string(port)), "x:", 60);
  try {
    limiter.reserve({{"a", 10, 1}});
    ADD_FAILURE() << "reserved without Redis";
  } catch (const LimiterUnavailable& error) {
    EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(limiter.refund({{"a", 10, 1}}), LimiterUnavailable);
  EXPECT_NO_THROW(limiter.reserve({{"unlimited", 0, 1}})) << "nothing to count needs no Redis";
}

TEST(RedisRateLimiter, ServesAgainWhenRedisReturns) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  RedisRateLimiter limiter(client_for(server.url()), "back:", 60);
  ASSERT_TRUE(limiter.reserve({{"a", 2, 1}}).granted);
  server.stop();
  EXPECT_THROW(limiter.reserve({{"a", 2, 1}}), LimiterUnavailable);
  server.start();
  std::optional<Reservation> after;
  for (int attempt = 0; attempt < 100 && !after; ++attempt) {
    try {
      after = limiter.reserve({{"a", 2, 1}});
    } catch (const LimiterUnavailable&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ASSERT_TRUE(after) << "never served again";
  EXPECT_TRUE(after->granted);
  EXPECT_NEAR(after->states[0].remaining, 1, 0.05) << "a restarted Redis starts with full buckets";
}

}  // namespace
}  // namespace chatflow::limits
