// Hot session turns in Redis against a real redis-server: what one replica writes another
// reads through Redis, a fill from the durable store never overwrites a turn appended while it
// read, and without Redis the durable store answers.
#include "framework/history/redis_turn_cache.h"

#include <ctime>
#include <functional>

#include <gtest/gtest.h>

#include "framework/storage/failure_log.h"
#include "framework/storage/redis_client.h"
#include "support/redis_server.h"

namespace chatflow::history {
namespace {

using testing::RedisServer;

#define SKIP_WITHOUT_REDIS()                       \
  if (RedisServer::binary().empty())               \
  GTEST_SKIP() << "redis-server is not installed " \
                  "(apt-get install redis-server)"

// A memory store that runs `during_load` in the middle of a load, after its turns were read:
// where another replica's append can fall.
class InterruptedStore final : public HistoryStore {
 public:
  std::vector<Turn> load(const SessionKey& key) override {
    std::vector<Turn> turns = store_->load(key);
    if (during_load) std::exchange(during_load, nullptr)();
    return turns;
  }
  bool append(const SessionKey& key, Turn turn, bool durable) override {
    return store_->append(key, std::move(turn), durable);
  }
  std::optional<SessionPage> list(const std::string& tenant, const std::string& owner, size_t limit,
                                  const std::string& after) override {
    return store_->list(tenant, owner, limit, after);
  }
  std::optional<SessionSummary> summary(const SessionKey& key) override {
    return store_->summary(key);
  }
  bool remove(const SessionKey& key) override { return store_->remove(key); }
  std::optional<SessionSummary> rename(const SessionKey& key, const std::string& title) override {
    return store_->rename(key, title);
  }
  std::vector<Turn> load_recent(const SessionKey& key, size_t max_turns) override {
    return store_->load_recent(key, max_turns);
  }
  std::vector<std::string> remove_owner(const std::string& tenant,
                                        const std::string& owner) override {
    return store_->remove_owner(tenant, owner);
  }
  SweepOutcome sweep(int64_t now) override { return store_->sweep(now); }
  bool set_active(const SessionKey& key, int64_t active_back) override {
    return store_->set_active(key, active_back);
  }
  void on_evicted(EvictionListener listener) override { store_->on_evicted(std::move(listener)); }

  std::function<void()> during_load;

  explicit InterruptedStore(Retention retention = {}) : store_(make_memory_store(retention)) {}

 private:
  std::unique_ptr<HistoryStore> store_;
};

struct Replica {
  InterruptedStore* durable;
  std::unique_ptr<RedisTurnCache> cache;
};

Replica replica(const std::string& url, Retention retention = {}) {
  redis::ClientOptions options;
  options.command_timeout = std::chrono::milliseconds(1000);
  auto client = std::make_shared<redis::Client>(redis::parse_url(url), options);
  auto durable = std::make_unique<InterruptedStore>(retention);
  InterruptedStore* raw = durable.get();
  return {raw, std::make_unique<RedisTurnCache>(
                   std::move(durable), client, "test:session:", std::chrono::minutes(1),
                   std::make_shared<storage::FailureLog>("test"), retention)};
}

Turn turn(const std::string& user) {
  Turn made;
  made.user = user;
  made.assistant = "answer to " + user;
  made.prompt_tokens = 3;
  made.completion_tokens = 4;
  return made;
}

std::vector<std::string> users(const std::vector<Turn>& turns) {
  std::vector<std::string> names;
  for (const auto& t : turns)
    names.push_back(t.user);
  return names;
}

const SessionKey kSession{"acme", "ann", "story"};

TEST(RedisTurnCache, AnotherReplicaReadsTheTurnsThroughRedis) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Replica first = replica(server.url());
  Replica second = replica(server.url());
  EXPECT_TRUE(first.cache->load(kSession).empty());
  ASSERT_TRUE(first.cache->append(kSession, turn("one"), true));
  EXPECT_EQ(users(first.durable->load(kSession)), std::vector<std::string>{"one"})
      << "the durable store has it";
  // The second replica's own durable store is empty: what it sees came through Redis.
  std::vector<Turn> seen = second.cache->load(kSession);
  ASSERT_EQ(users(seen), std::vector<std::string>{"one"});
  EXPECT_EQ(seen[0].assistant, "answer to one");
  EXPECT_EQ(seen[0].completion_tokens, 4);
  EXPECT_GT(seen[0].time, 0);
  ASSERT_TRUE(second.cache->append(kSession, turn("two"), true));
  EXPECT_EQ(users(first.cache->load(kSession)), (std::vector<std::string>{"one", "two"}));
  EXPECT_TRUE(first.cache->load({"acme", "bob", "story"}).empty()) << "another owner's session";
}

// A turn placed among fewer turns than the cached list holds was placed before another
// replica's turn arrived: the durable store moves its distances back (a fleet on PostgreSQL),
// the list would keep them unmoved, so the list goes and is filled again from the durable store.
TEST(RedisTurnCache, ATurnPlacedBeforeAnotherReplicasAppendDropsTheCachedList) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Replica first = replica(server.url());
  Replica second = replica(server.url());
  EXPECT_TRUE(first.cache->load(kSession).empty()) << "cached: a session of no turns yet";
  ASSERT_TRUE(first.cache->append(kSession, turn("one"), true));
  ASSERT_EQ(users(second.cache->load(kSession)), std::vector<std::string>{"one"})
      << "through Redis";
  Turn placed_after = turn("two");
  placed_after.placed_among = 1;
  ASSERT_TRUE(second.cache->append(kSession, placed_after, true));
  EXPECT_EQ(users(first.cache->load(kSession)), (std::vector<std::string>{"one", "two"}))
      << "a turn placed among every cached turn is appended to the list";
  Turn placed_before = turn("three");
  placed_before.placed_among = 1;
  ASSERT_TRUE(second.cache->append(kSession, placed_before, true));
  // The list went: the first replica reads its own durable store, which has its turn only.
  EXPECT_EQ(users(first.cache->load(kSession)), std::vector<std::string>{"one"});
}

TEST(RedisTurnCache, BranchLinksGoThroughRedisAndASwitchIsNeverHiddenByTheCachedList) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Replica first = replica(server.url());
  Replica second = replica(server.url());
  ASSERT_TRUE(first.cache->append(kSession, turn("one"), true));
  Turn again = turn("");
  again.parent_back = 0;
  again.question_back = 1;
  ASSERT_TRUE(first.cache->append(kSession, again, true));
  EXPECT_EQ(first.cache->load(kSession).size(), 2u) << "the list is in Redis now";
  // The second replica's durable store is empty: the links came through Redis.
  std::vector<Turn> seen = second.cache->load(kSession);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].parent_back, 0);
  EXPECT_EQ(seen[1].question_back, 1);
  EXPECT_EQ(seen[0].parent_back, 1);
  ASSERT_TRUE(first.cache->set_active(kSession, 1));
  EXPECT_EQ(first.cache->load(kSession).back().active_back, 1)
      << "the cached list went with the switch; the durable store's is read";
  EXPECT_EQ(turn_of(turn_json(seen[1])).question_back, 1);
  EXPECT_EQ(turn_of(R"({"user":"u","assistant":"a","status":"completed","prompt_tokens":1,)"
                    R"("completion_tokens":1,"time":5})")
                .parent_back,
            1)
      << "a turn cached before branches is a chain";
}

TEST(RedisTurnCache, AFillNeverHidesATurnAppendedWhileItRead) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Replica first = replica(server.url());
  Replica second = replica(server.url());
  // The second replica reads its durable store (nothing), and meanwhile the first appends.
  second.durable->during_load = [&] { first.cache->append(kSession, turn("meanwhile"), true); };
  EXPECT_TRUE(second.cache->load(kSession).empty());
  // The second's stale fill was refused, so the next load goes back to a durable store.
  EXPECT_EQ(users(first.cache->load(kSession)), std::vector<std::string>{"meanwhile"})
      << "a stale fill hid the appended turn";
}

TEST(RedisTurnCache, WithoutRedisTheDurableStoreAnswers) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Replica only = replica(server.url());
  ASSERT_TRUE(only.cache->append(kSession, turn("one"), true));
  server.stop();
  EXPECT_TRUE(only.cache->append(kSession, turn("two"), true)) << "the durable write succeeded";
  EXPECT_EQ(users(only.cache->load(kSession)), (std::vector<std::string>{"one", "two"}));
  EXPECT_TRUE(only.cache->remove(kSession));
  EXPECT_TRUE(only.cache->load(kSession).empty());
}

TEST(RedisTurnCache, ANewestTurnsLoadReadsOnlyThoseFromRedis) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Replica first = replica(server.url());
  Replica second = replica(server.url());
  for (const char* user : {"one", "two", "three"})
    ASSERT_TRUE(first.cache->append(kSession, turn(user), true));
  EXPECT_EQ(first.cache->load(kSession).size(), 3u) << "now cached, whole";
  EXPECT_EQ(users(second.cache->load_recent(kSession, 2)),
            (std::vector<std::string>{"two", "three"}));
  EXPECT_EQ(users(second.cache->load_recent(kSession, 5)),
            (std::vector<std::string>{"one", "two", "three"}))
      << "a session shorter than the limit, its header among the entries read";
}

TEST(RedisTurnCache, CachedTurnsPastTheTtlAreNeverGivenBack) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Retention retention;
  retention.ttl_days = 1;
  Replica first = replica(server.url(), retention);
  Replica second = replica(server.url(), retention);
  // Cached by a load before the turns are appended: they then reach Redis as written.
  EXPECT_TRUE(first.cache->load(kSession).empty());
  Turn old_turn = turn("old");
  old_turn.time = static_cast<int64_t>(std::time(nullptr)) - 2 * 86400;
  ASSERT_TRUE(first.cache->append(kSession, old_turn, true));
  ASSERT_TRUE(first.cache->append(kSession, turn("new"), true));
  EXPECT_EQ(users(second.cache->load(kSession)), std::vector<std::string>{"new"});
  EXPECT_EQ(users(second.cache->load_recent(kSession, 2)), std::vector<std::string>{"new"});
}

TEST(RedisTurnCache, EvictedAndPurgedSessionsLeaveRedis) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  Retention retention;
  retention.max_sessions_per_owner = 1;
  Replica first = replica(server.url(), retention);
  Replica second = replica(server.url(), retention);
  std::vector<SessionKey> told;
  first.cache->on_evicted([&](const std::vector<SessionKey>& keys) {
    told.insert(told.end(), keys.begin(), keys.end());
  });
  // Each session is cached (by a load) before its turn: the turn then reaches Redis, and the
  // second replica, whose own durable store stays empty, reads it there.
  const SessionKey next{"acme", "ann", "next"};
  EXPECT_TRUE(first.cache->load(kSession).empty());
  EXPECT_TRUE(first.cache->load(next).empty());
  ASSERT_TRUE(first.cache->append(kSession, turn("one"), true));
  ASSERT_EQ(users(second.cache->load(kSession)), std::vector<std::string>{"one"});
  ASSERT_TRUE(first.cache->append(next, turn("two"), true));  // evicts the story
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0], kSession);
  EXPECT_TRUE(second.cache->load(kSession).empty()) << "the evicted session stayed in Redis";

  EXPECT_EQ(users(second.cache->load(next)), std::vector<std::string>{"two"});
  EXPECT_EQ(first.cache->remove_owner("acme", "ann"), std::vector<std::string>{"next"});
  EXPECT_TRUE(second.cache->load(next).empty()) << "the purged session stayed in Redis";
}

}  // namespace
}  // namespace chatflow::history
