// An identity provider's key set kept fresh: rotation picked up through an unknown kid, such
// fetches rate-limited, a failed or empty fetch keeping the set in use, the periodic refresh,
// and lookups that never wait: the request whose kid asked is called back after the fetch.
#include "framework/security/jwks_cache.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
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

using Asker = JwksCache::Asker;

// What waiting for a fetch looks like to a request that can wait without a thread: called back
// once the fetch has ended.
struct Callback {
  std::mutex mutex;
  std::condition_variable called;
  bool done = false;
  std::thread::id thread;

  std::function<void()> function() {
    return [this] {
      std::lock_guard lock(mutex);
      done = true;
      thread = std::this_thread::get_id();
      called.notify_all();
    };
  }
  bool wait(std::chrono::milliseconds timeout = 5000ms) {
    std::unique_lock lock(mutex);
    return called.wait_for(lock, timeout, [&] { return done; });
  }
};

// The key for `kid` the way the auth stage gets it: at once, or after the fetch its lookup
// names has ended (throws JwtError when there is none).
VerificationKey key_after_waiting(JwksCache& cache, const std::string& kid) {
  JwksCache::Lookup found = cache.lookup(naming(kid), Asker::returning_request);
  if (found.key) return *found.key;
  Callback callback;
  cache.when_fetched(found.awaited_fetch, callback.function());
  EXPECT_TRUE(callback.wait()) << "never called back";
  return cache.current_key(naming(kid));
}

TEST(JwksCache, AnUnknownKidFetchesTheRotatedSetOnce) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(1000ms));
  EXPECT_EQ(provider.fetches, 1) << "fetched at start";
  EXPECT_EQ(key_after_waiting(cache, "a-1").algorithm, "RS256");
  EXPECT_EQ(provider.fetches, 1) << "a known kid fetches nothing";
  std::this_thread::sleep_for(1050ms);
  provider.serve(key_set({second_key().jwk()}));
  EXPECT_EQ(key_after_waiting(cache, "b-1").algorithm, "ES256");
  EXPECT_EQ(provider.fetches, 2);
  // The old key is gone with the set it came in.
  EXPECT_THROW(cache.lookup(naming("a-1"), Asker::new_request), JwtError);
  EXPECT_NE(provider.logged().find("now holds: b-1"), std::string::npos) << provider.logged();
}

TEST(JwksCache, UnknownKidsFetchAtMostOncePerInterval) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(60'000ms));
  // Within the interval of the start's fetch: refused at once, the provider not asked.
  for (int i = 0; i < 200; ++i) {
    try {
      cache.lookup(naming("made-up-" + std::to_string(i)), Asker::new_request);
      ADD_FAILURE() << "an unknown kid was accepted or waits";
    } catch (const JwtError& error) {
      EXPECT_NE(std::string(error.what()).find("is not in the key set"), std::string::npos);
    }
  }
  EXPECT_EQ(provider.fetches, 1);
  EXPECT_EQ(cache.fetches(), 1);
  // Even the rotated key waits for the interval (or the periodic refresh).
  provider.serve(key_set({second_key().jwk()}));
  EXPECT_THROW(cache.lookup(naming("b-1"), Asker::returning_request), JwtError);
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
        key_after_waiting(cache, "random-" + std::to_string(i));
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
  JwksCache cache(provider.settings(1000ms));
  std::this_thread::sleep_for(1050ms);
  provider.fail();
  EXPECT_THROW(key_after_waiting(cache, "b-1"), JwtError);
  EXPECT_EQ(provider.fetches, 2);
  EXPECT_EQ(key_after_waiting(cache, "a-1").key_id, "a-1") << "the set in use was dropped";
  EXPECT_NE(provider.logged().find("keeping the key set in use (a-1)"), std::string::npos)
      << provider.logged();
  EXPECT_NE(provider.logged().find("HTTP 503"), std::string::npos) << provider.logged();
  // A set with no usable key is no better than a failure (after a failure the set is fetched
  // again once min_refresh_interval has passed).
  provider.serve(R"({"keys":[]})");
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (provider.logged().find("holds no key chatflow can verify") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_NE(provider.logged().find("holds no key chatflow can verify"), std::string::npos)
      << provider.logged();
  EXPECT_EQ(key_after_waiting(cache, "a-1").key_id, "a-1");
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
  EXPECT_EQ(cache.lookup(naming("b-1"), Asker::new_request).key->algorithm, "ES256");
}

// Nothing waits on the caller's thread: a lookup during a slow fetch answers at once, and the
// request whose kid asked is called back, on the refresher's thread, once the fetch has ended.
TEST(JwksCache, LookupsNeverWaitAndTheAskerIsCalledBackAfterTheFetch) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(1000ms));
  std::this_thread::sleep_for(1050ms);
  provider.serve(key_set({first_key().jwk(), second_key().jwk()}));
  {
    std::lock_guard lock(provider.mutex);
    provider.delay = 1500ms;
  }
  auto started = std::chrono::steady_clock::now();
  JwksCache::Lookup asked = cache.lookup(naming("b-1"), Asker::new_request);
  EXPECT_FALSE(asked.key);
  EXPECT_EQ(asked.awaited_fetch, 2);
  while (provider.fetches < 2)
    std::this_thread::sleep_for(5ms);
  // The fetch is under way: a known kid is answered at once, and a new request with an unknown
  // kid does not wait for a fetch that began before it asked.
  EXPECT_EQ(cache.lookup(naming("a-1"), Asker::new_request).key->key_id, "a-1");
  EXPECT_THROW(cache.lookup(naming("b-1"), Asker::new_request), JwtError);
  // The same request, returning (the auth stage), waits for the fetch its kid asked for.
  JwksCache::Lookup returning = cache.lookup(naming("b-1"), Asker::returning_request);
  EXPECT_FALSE(returning.key);
  EXPECT_EQ(returning.awaited_fetch, 2);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 500ms) << "a lookup waited";
  Callback callback;
  cache.when_fetched(returning.awaited_fetch, callback.function());
  EXPECT_FALSE(callback.wait(0ms)) << "called before the fetch ended";
  EXPECT_THROW(cache.current_key(naming("b-1")), JwtError);
  ASSERT_TRUE(callback.wait());
  EXPECT_NE(callback.thread, std::this_thread::get_id());
  EXPECT_EQ(cache.current_key(naming("b-1")).algorithm, "ES256");
  EXPECT_EQ(provider.fetches, 2);
  // Asking after the fetch has ended: called back all the same, never on the caller's thread.
  Callback late;
  cache.when_fetched(returning.awaited_fetch, late.function());
  ASSERT_TRUE(late.wait());
  EXPECT_NE(late.thread, std::this_thread::get_id());
}

// A periodic refresh under way is not a fetch an unknown kid asked for: the request is refused
// at once instead of waiting for it.
TEST(JwksCache, AnUnknownKidDoesNotWaitForAPeriodicRefreshUnderWay) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  JwksCache cache(provider.settings(1000ms, 1200ms));
  {
    std::lock_guard lock(provider.mutex);
    provider.delay = 1500ms;
  }
  while (provider.fetches < 2)
    std::this_thread::sleep_for(5ms);
  for (Asker asker : {Asker::new_request, Asker::returning_request})
    EXPECT_THROW(cache.lookup(naming("made-up"), asker), JwtError);
  EXPECT_EQ(cache.fetches(), 2);
}

TEST(JwksCache, WhatStillWaitsWhenTheCacheGoesIsCalledBack) {
  Provider provider;
  provider.serve(key_set({first_key().jwk()}));
  Callback callback;
  {
    JwksCache cache(provider.settings(1000ms));
    cache.when_fetched(99, callback.function());
  }
  EXPECT_TRUE(callback.wait(0ms));
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
