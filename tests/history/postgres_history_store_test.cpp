#include "framework/history/postgres_history_store.h"

#include <gtest/gtest.h>

#include "support/postgres_server.h"

namespace chatflow::history {
namespace {

class PostgresHistory : public testing::PostgresDatabaseTest {
 protected:
  // One "replica": its own pool and store over the shared database.
  std::unique_ptr<HistoryStore> replica() {
    postgres::ClientOptions options;
    options.url = url_;
    return make_postgres_store(std::make_shared<postgres::Client>(options));
  }
};

SessionKey key(const std::string& session, const std::string& owner = "user:u1") {
  return {"acme", owner, session};
}

Turn turn(const std::string& user, const std::string& assistant,
          TurnStatus status = TurnStatus::completed) {
  return {user, assistant, status, 3, 4, 0};
}

TEST_F(PostgresHistory, ADurableTurnIsOnEveryReplicaOnceAppendReturns) {
  auto first = replica();
  auto second = replica();
  ASSERT_TRUE(first->append(key("s1"), turn("hi", "hello"), /*durable=*/true));
  std::vector<Turn> seen = second->load(key("s1"));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].user, "hi");
  EXPECT_EQ(seen[0].assistant, "hello");
  EXPECT_EQ(seen[0].status, TurnStatus::completed);
  EXPECT_EQ(seen[0].prompt_tokens, 3);
  EXPECT_EQ(seen[0].completion_tokens, 4);
  EXPECT_GT(seen[0].time, 0);
  ASSERT_TRUE(second->append(key("s1"), turn("and?", "more"), true));
  std::vector<Turn> both = first->load(key("s1"));
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].assistant, "more") << "turns keep their order across replicas";
}

TEST_F(PostgresHistory, QueuedTurnsAreSeenAtOnceAndWrittenSoon) {
  auto first = replica();
  first->append(key("s1"), turn("stop", "", TurnStatus::cancelled), /*durable=*/false);
  ASSERT_EQ(first->load(key("s1")).size(), 1u) << "the replica that queued it sees it";
  ASSERT_TRUE(first->append(key("s1"), turn("again", "done"), true));
  auto second = replica();
  std::vector<Turn> seen = second->load(key("s1"));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].status, TurnStatus::cancelled) << "the queued turn went first";
  EXPECT_EQ(seen[1].assistant, "done");
}

TEST_F(PostgresHistory, TextIsKeptByteForByte) {
  auto store = replica();
  std::string odd_user("nul \0 and \xff\xfe", 12);
  std::string odd_session("s\0x", 3);
  ASSERT_TRUE(store->append(key(odd_session), turn(odd_user, std::string("\0", 1)), true));
  std::vector<Turn> seen = replica()->load(key(odd_session));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].user, odd_user);
  EXPECT_EQ(seen[0].assistant, std::string("\0", 1));
  EXPECT_TRUE(replica()->load(key("s")).empty()) << "a session id is not cut at its NUL";
}

TEST_F(PostgresHistory, AnotherOwnersSessionOfTheSameIdIsAnotherSession) {
  auto store = replica();
  ASSERT_TRUE(store->append(key("s1", "user:u1"), turn("mine", "a"), true));
  EXPECT_TRUE(store->load(key("s1", "user:u2")).empty());
  EXPECT_FALSE(store->summary(key("s1", "user:u2")));
  EXPECT_FALSE(store->remove(key("s1", "user:u2")));
  EXPECT_EQ(store->load(key("s1", "user:u1")).size(), 1u);
}

TEST_F(PostgresHistory, ListsTheOwnersSessionsLatestActivityFirstInPages) {
  auto store = replica();
  for (const char* session : {"a", "b", "c"})
    ASSERT_TRUE(store->append(key(session), turn(std::string("first of ") + session, "x"), true));
  ASSERT_TRUE(store->append(key("a"), turn("again", "y"), true));
  ASSERT_TRUE(store->append(key("other", "user:u2"), turn("not mine", "z"), true));
  auto page = replica()->list("acme", "user:u1", 2, "");
  ASSERT_TRUE(page);
  ASSERT_EQ(page->sessions.size(), 2u);
  EXPECT_EQ(page->sessions[0].session, "a");
  EXPECT_EQ(page->sessions[0].turns, 2);
  EXPECT_EQ(page->sessions[0].title, "first of a");
  EXPECT_EQ(page->sessions[1].session, "c");
  EXPECT_TRUE(page->has_more);
  auto rest = store->list("acme", "user:u1", 2, "c");
  ASSERT_TRUE(rest);
  ASSERT_EQ(rest->sessions.size(), 1u);
  EXPECT_EQ(rest->sessions[0].session, "b");
  EXPECT_FALSE(rest->has_more);
  EXPECT_FALSE(store->list("acme", "user:u1", 2, "no-such-session"));
}

TEST_F(PostgresHistory, ARenamedTitleReplacesTheFirstMessageOnEveryReplica) {
  auto store = replica();
  EXPECT_FALSE(store->rename(key("s1"), "nothing to name")) << "no session, no title";
  ASSERT_TRUE(store->append(key("s1"), turn("what is the weather", "sunny"), true));
  auto renamed = store->rename(key("s1"), "Weather");
  ASSERT_TRUE(renamed);
  EXPECT_EQ(renamed->title, "Weather");
  EXPECT_EQ(replica()->summary(key("s1"))->title, "Weather");
  EXPECT_EQ(store->rename(key("s1"), "Forecast")->title, "Forecast");
}

TEST_F(PostgresHistory, ADeletedSessionIsGoneAndItsIdStartsAfresh) {
  auto store = replica();
  ASSERT_TRUE(store->append(key("s1"), turn("one", "1"), true));
  store->append(key("s1"), turn("two", "", TurnStatus::failed), false);
  ASSERT_TRUE(store->rename(key("s1"), "Named"));
  EXPECT_TRUE(store->remove(key("s1")));
  EXPECT_TRUE(replica()->load(key("s1")).empty()) << "the queued turn did not come back";
  EXPECT_FALSE(store->remove(key("s1")));
  ASSERT_TRUE(store->append(key("s1"), turn("new start", "ok"), true));
  EXPECT_EQ(store->summary(key("s1"))->title, "new start") << "the old title went too";
}

}  // namespace
}  // namespace chatflow::history
