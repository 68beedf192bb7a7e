// Hot session turns in Redis against a real redis-server: what one replica writes another
// reads through Redis, a fill from the durable store never overwrites a turn appended while it
// read, and without Redis the durable store answers.
#include "framework/history/redis_turn_cache.h"

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

  std::function<void()> during_load;

 private:
  std::unique_ptr<HistoryStore> store_ = make_memory_store();
};

struct Replica {
  InterruptedStore* durable;
  std::unique_ptr<RedisTurnCache> cache;
};

Replica replica(const std::string& url) {
  redis::ClientOptions options;
  options.command_timeout = std::chrono::milliseconds(1000);
  auto client = std::make_shared<redis::Client>(redis::parse_url(url), options);
  auto durable = std::make_unique<InterruptedStore>();
  InterruptedStore* raw = durable.get();
  return {raw, std::make_unique<RedisTurnCache>(std::move(durable), client,
                                                "test:session:", std::chrono::minutes(1),
                                                std::make_shared<storage::FailureLog>("test"))};
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

}  // namespace
}  // namespace chatflow::history
