// An identity provider's key set kept fresh: rotation picked up through an unknown kid, such
// fetches rate-limited, a failed or empty fetch keeping the set in use, the periodic refresh,
// and a request's wait for a slow provider bounded.
#include "framework/security/jwks_cache.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "support/signing_keys.h"

namespace chatflow::security {
namespace {

using namespace std::chrono_literals;
using testing::key_set;
using testing::SigningKey;

// What the provider serves, changed by the test; every fetch is counted.
struct Provider {
  std::mutex mutex;
  std::string served;
  bool failing = false;
  std::chrono::milliseconds delay{0};
  std::atomic<int> fetches{0};
  std::string log;

  void serve(std::string text) {
    std::lock_guard lock(mutex);
    served = std::move(text);
    failing = false;
  }
  void fail() {
    std::lock_guard lock(mutex);
    failing = true;
  }
  std::string logged() {
    std::lock_guard lock(mutex);
    return log;
  }

  JwksCache::Settings settings(std::chrono::milliseconds min_refresh,
                               std::chrono::milliseconds refresh = 0ms) {
    JwksCache::Settings settings;
    settings.source = "https://login.example/jwks.json";
    settings.fetch = [this](JwksCache::Clock::time_point) {
      ++fetches;
      std::chrono::milliseconds wait;
      {
        std::lock_guard lock(mutex);
        wait = delay;
      }
      std::this_thread::sleep_for(wait);
      std::lock_guard lock(mutex);
      if (failing) throw std::runtime_error("it answered HTTP 503");
      return served;
    };
    settings.refresh_interval = refresh;
    settings.min_refresh_interval = min_refresh;
    settings.fetch_timeout = 2000ms;
    settings.log = [this](const std::string& line) {
      std::lock_guard lock(mutex);
      log += line;
    };
    return settings;
  }
};

JwtHeader naming(const std::string& key_id) {
  return {"RS256", key_id};
}

const SigningKey& first_key() {
  static const SigningKey key("RS256", "a-1");
  return key;
}
const SigningKey& second_key() {
  static const SigningKey key("ES256", "b-1");
  return key;
}

TEST(JwksCache, AnUnknownKidFetchesTheRotatedSetOnce) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(0ms));
  EXPECT_EQ(provider.fetches, 1) << "fetched at start";
  EXPECT_EQ(cache.key_for(naming("a-1")).algorithm, "RS256");
  EXPECT_EQ(provider.fetches, 1) << "a known kid fetches nothing";
  provider.serve(key_set({second_key().jwk()}));
  EXPECT_EQ(cache.key_for(naming("b-1")).algorithm, "ES256");
  EXPECT_EQ(provider.fetches, 2);
  // The old key is gone with the set it came in.
  EXPECT_THROW(cache.key_for(naming("a-1")), JwtError);
  EXPECT_NE(provider.logged().find("now holds: b-1"), std::string::npos) << provider.logged();
}

TEST(JwksCache, UnknownKidsFetchAtMostOncePerInterval) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(60'000ms));
  // Within the interval of the start's fetch: refused at once, the provider not asked.
  for (int i = 0; i < 200; ++i) {
    try {
      cache.key_for(naming("made-up-" + std::to_string(i)));
      ADD_FAILURE() << "an unknown kid was accepted";
    } catch (const JwtError& error) {
      EXPECT_NE(std::string(error.what()).find("is not in the key set"), std::string::npos);
    }
  }
  EXPECT_EQ(provider.fetches, 1);
  EXPECT_EQ(cache.fetches(), 1);
  // Even the rotated key waits for the interval (or the periodic refresh).
  provider.serve(key_set({second_key().jwk()}));
  EXPECT_THROW(cache.key_for(naming("b-1")), JwtError);
  EXPECT_EQ(provider.fetches, 1);
}

TEST(JwksCache, OnceTheIntervalHasPassedOneFetchServesAFloodOfUnknownKids) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(300ms));
  std::this_thread::sleep_for(350ms);
  std::vector<std::thread> callers;
  std::atomic<int> refused{0};
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&, i] {
      try {
        cache.key_for(naming("random-" + std::to_string(i)));
      } catch (const JwtError&) {
        ++refused;
      }
    });
  }
  for (auto& caller : callers)
    caller.join();
  EXPECT_EQ(refused, 8);
  EXPECT_EQ(provider.fetches, 2) << "eight unknown kids, one fetch";
}

TEST(JwksCache, AFailedOrEmptyFetchKeepsTheSetInUse) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(0ms));
  provider.fail();
  EXPECT_THROW(cache.key_for(naming("b-1")), JwtError);
  EXPECT_EQ(provider.fetches, 2);
  EXPECT_EQ(cache.key_for(naming("a-1")).key_id, "a-1") << "the set in use was dropped";
  EXPECT_NE(provider.logged().find("keeping the key set in use (a-1)"), std::string::npos)
      << provider.logged();
  EXPECT_NE(provider.logged().find("HTTP 503"), std::string::npos) << provider.logged();
  // A set with no usable key is no better than a failure.
  provider.serve(R"({"keys":[]})");
  EXPECT_THROW(cache.key_for(naming("c-1")), JwtError);
  EXPECT_EQ(cache.key_for(naming("a-1")).key_id, "a-1");
}

TEST(JwksCache, ThePeriodicRefreshPicksUpANewSetWithoutAnyRequest) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(60'000ms, 100ms));
  provider.serve(key_set({first_key().jwk(), second_key().jwk()}));
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (provider.fetches < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_GE(provider.fetches, 3);
  // Known now, though unknown kids may not fetch for a minute.
  EXPECT_EQ(cache.key_for(naming("b-1")).algorithm, "ES256");
}

TEST(JwksCache, ARequestWaitsForASlowProviderOnlyUntilTheTimeout) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  auto settings = provider.settings(0ms);
  settings.fetch_timeout = 200ms;
  JwksCache cache(std::move(settings));
  {
    std::lock_guard lock(provider.mutex);
    provider.delay = 1500ms;
  }
  auto started = std::chrono::steady_clock::now();
  EXPECT_THROW(cache.key_for(naming("b-1")), JwtError);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1200ms)
      << "the request waited for the whole fetch";
}

TEST(JwksCache, ASetThatCannotBeFetchedAtStartIsAnErrorNamingTheSource) {
  Provider provider;
  provider.fail();
  try {
    JwksCache cache(provider.settings(0ms));
    ADD_FAILURE() << "started without a key set";
  } catch (const std::runtime_error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("https://login.example/jwks.json"), std::string::npos) << message;
    EXPECT_NE(message.find("HTTP 503"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace chatflow::security
