#include "framework/history/postgres_history_store.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "framework/history/turn_tree.h"
#include "support/postgres_server.h"
#include "support/turn_chains.h"

namespace chatflow::history {
namespace {

class PostgresHistory : public testing::PostgresDatabaseTest {
 protected:
  // One "replica": its own pool and store over the shared database.
  std::unique_ptr<HistoryStore> replica(Retention retention = {}) {
    postgres::ClientOptions options;
    options.url = url_;
    options.connect_timeout_s = 2;
    return make_postgres_store(std::make_shared<postgres::Client>(options), retention);
  }
};

int64_t now() {
  return static_cast<int64_t>(std::time(nullptr));
}

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

// The Responses API's kept responses (migration 4): on every replica, per owner, replaced by
// the same id, gone for good once forgotten.
TEST_F(PostgresHistory, KeptResponsesAreOnEveryReplicaPerOwner) {
  auto first = replica();
  auto second = replica();
  first->keep_response(key("resp_1"), {"{\"v\":1}", "[]"}, now());
  auto seen = second->kept_response(key("resp_1"));
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->response_json, "{\"v\":1}");
  EXPECT_EQ(seen->conversation_json, "[]");
  EXPECT_FALSE(second->kept_response(key("resp_1", "user:u2"))) << "another owner's id is none";
  EXPECT_FALSE(second->forget_response(key("resp_1", "user:u2")));
  second->keep_response(key("resp_1"), {"{\"v\":2}", "[1]"}, now());
  EXPECT_EQ(first->kept_response(key("resp_1"))->response_json, "{\"v\":2}");
  EXPECT_TRUE(first->forget_response(key("resp_1")));
  EXPECT_FALSE(second->kept_response(key("resp_1")));
}

// Removing an owner (DELETE /v1/sessions) takes its kept responses too; keeping one past the
// owner's max_responses_per_owner removes the owner's oldest, whichever replica kept them.
TEST_F(PostgresHistory, KeptResponsesGoWithTheOwnerAndAreBoundedPerOwner) {
  Retention limits;
  limits.max_responses_per_owner = 2;
  auto first = replica(limits);
  auto second = replica(limits);
  first->keep_response(key("resp_1"), {"{}", "[]"}, 1001);
  second->keep_response(key("resp_2"), {"{}", "[]"}, 1002);
  first->keep_response(key("resp_3"), {"{}", "[]"}, 1002);
  second->keep_response(key("resp_b", "user:u2"), {"{}", "[]"}, 1);
  EXPECT_FALSE(second->kept_response(key("resp_1"))) << "the oldest went";
  EXPECT_TRUE(second->kept_response(key("resp_2")));
  EXPECT_TRUE(second->kept_response(key("resp_3")));
  EXPECT_TRUE(first->kept_response(key("resp_b", "user:u2"))) << "another owner's are apart";
  first->remove_owner("acme", "user:u1");
  EXPECT_FALSE(second->kept_response(key("resp_2")));
  EXPECT_FALSE(second->kept_response(key("resp_3")));
  EXPECT_TRUE(second->kept_response(key("resp_b", "user:u2")));
}

TEST_F(PostgresHistory, BranchLinksAndTheShownTurnAreKeptForEveryReplica) {
  auto first = replica();
  auto second = replica();
  ASSERT_TRUE(first->append(key("s1"), turn("one", "1"), true));
  ASSERT_TRUE(first->append(key("s1"), turn("two", "2"), true));
  Turn again = turn("", "2b");
  again.parent_back = 1;    // under turn 1
  again.question_back = 1;  // turn 2's question
  ASSERT_TRUE(first->append(key("s1"), again, /*durable=*/false));
  // The replica that queued the turn writes it before the switch (as it does before any write
  // of the session).
  ASSERT_TRUE(first->set_active(key("s1"), 1)) << "show turn 2";
  std::vector<Turn> seen = second->load(key("s1"));
  ASSERT_EQ(seen.size(), 3u) << "the queued turn was written before the switch";
  EXPECT_EQ(seen[0].parent_back, 1) << "a first turn keeps the default";
  EXPECT_EQ(seen[2].parent_back, 1);
  EXPECT_EQ(seen[2].question_back, 1);
  EXPECT_EQ(seen[2].user, "");
  EXPECT_EQ(seen[2].active_back, 1);
  EXPECT_EQ(first->load(key("s1")).back().active_back, 1);
  EXPECT_TRUE(second->set_active(key("s1"), 0));
  EXPECT_EQ(first->load(key("s1")).back().active_back, 0) << "switched on another replica";
  EXPECT_FALSE(first->set_active(key("s1", "user:u2"), 0)) << "another owner's session is none";
}

// Replicas placing turns in one session at once, each under its own in-process session lock as
// HistoryStoreResource::append_turn takes it: every turn keeps the parent it was placed under,
// though another replica appended between its placing and its write.
TEST_F(PostgresHistory, TurnsPlacedAtOnceOnTwoReplicasKeepTheirParents) {
  constexpr int kThreads = 4;
  constexpr int kTurnsEach = 15;
  std::unique_ptr<HistoryStore> replicas[2] = {replica(), replica()};
  std::mutex session_locks[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      HistoryStore& store = *replicas[t % 2];
      int64_t parent = 0;
      for (int i = 0; i < kTurnsEach; ++i) {
        std::string question = testing::chain_question(t, i);
        {
          std::lock_guard lock(session_locks[t % 2]);
          Turn placed = turn(question, "a");
          place_turn(placed, store.load(key("s1")), parent);
          ASSERT_TRUE(store.append(key("s1"), placed, /*durable=*/i % 2 == 0));
        }
        std::vector<Turn> stored = store.load(key("s1"));
        parent = 0;
        for (size_t id = stored.size(); id >= 1 && parent == 0; --id)
          if (stored[id - 1].user == question) parent = static_cast<int64_t>(id);
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(testing::misplaced_chain_turns(replicas[0]->load(key("s1")), kThreads, kTurnsEach), 0)
      << "turns under another parent than the one they were placed under";
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

TEST_F(PostgresHistory, AQueuedTurnWaitsOutAnOutageAndArrives) {
  auto store = replica();
  ASSERT_TRUE(store->append(key("s1"), turn("one", "1"), true));
  ::testing::internal::CaptureStderr();
  server_->pause();
  store->append(key("s1"), turn("two", "", TurnStatus::cancelled), /*durable=*/false);
  EXPECT_FALSE(store->append(key("s2"), turn("lost", "x"), true))
      << "a durable turn cannot wait: its answer says it was not kept";
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(store->lost_turns(), 1) << "only the durable one";
  server_->resume();
  std::vector<Turn> seen;
  for (int tries = 0; tries < 300 && seen.size() < 2; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    seen = replica()->load(key("s1"));
  }
  ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].user, "two");
  EXPECT_EQ(seen[1].status, TurnStatus::cancelled);
  EXPECT_EQ(store->lost_turns(), 1);
}

TEST_F(PostgresHistory, LoadRecentGivesTheNewestTurnsOldestFirst) {
  auto store = replica();
  for (const char* user : {"a", "b", "c", "d"})
    ASSERT_TRUE(store->append(key("s1"), turn(user, "x"), true));
  std::vector<Turn> recent = store->load_recent(key("s1"), 2);
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0].user, "c");
  EXPECT_EQ(recent[1].user, "d");
  EXPECT_EQ(store->load_recent(key("s1"), 0).size(), 4u);
  EXPECT_EQ(store->load_recent(key("s1"), 10).size(), 4u);
}

TEST_F(PostgresHistory, ExpiredTurnsAreNeverReadAndTheSweepDeletesThemWithTheirTitles) {
  Retention retention;
  retention.ttl_days = 1;
  auto store = replica(retention);
  Turn old_turn = turn("old", "x");
  old_turn.time = now() - 2 * 86400;
  ASSERT_TRUE(store->append(key("s1"), old_turn, true));
  ASSERT_TRUE(store->append(key("s1"), turn("new", "y"), true));
  old_turn.user = "forgotten";
  ASSERT_TRUE(store->append(key("gone"), old_turn, true));
  std::vector<Turn> seen = store->load(key("s1"));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].user, "new");
  EXPECT_EQ(store->summary(key("s1"))->turns, 1);
  EXPECT_FALSE(store->summary(key("gone")));
  auto page = store->list("acme", "user:u1", 10, "");
  ASSERT_EQ(page->sessions.size(), 1u);
  EXPECT_EQ(page->sessions[0].session, "s1");

  postgres::ClientOptions options;
  options.url = url_;
  postgres::Client client(options);
  client.exec("INSERT INTO history_titles VALUES ('acme', 'user:u1', 'gone', 'Old title')");
  // s1's old turn went when its new one restarted the session; the sweep takes the rest.
  SweepOutcome swept = store->sweep(now());
  EXPECT_EQ(swept.expired_turns, 1);
  EXPECT_EQ(client.exec("SELECT count(*) FROM history_turns").integer(0, 0), 1);
  EXPECT_EQ(client.exec("SELECT count(*) FROM history_titles").integer(0, 0), 0)
      << "a session with no turn left keeps no title";
}

TEST_F(PostgresHistory, StartingASessionPastTheOwnersLimitEvictsTheLeastRecentlyActive) {
  Retention retention;
  retention.max_sessions_per_owner = 2;
  auto first = replica(retention);
  auto second = replica(retention);
  std::vector<SessionKey> told;
  second->on_evicted([&](const std::vector<SessionKey>& keys) {
    told.insert(told.end(), keys.begin(), keys.end());
  });
  ASSERT_TRUE(first->append(key("s1"), turn("one", "1"), true));
  ASSERT_TRUE(first->append(key("s2"), turn("two", "2"), true));
  ASSERT_TRUE(first->append(key("s1"), turn("one again", "1"), true));  // s2 is now the oldest
  ASSERT_TRUE(first->append(key("theirs", "user:u2"), turn("other owner", "x"), true));
  ASSERT_TRUE(second->append(key("s3"), turn("three", "3"), true));
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].session, "s2");
  EXPECT_TRUE(first->load(key("s2")).empty());
  EXPECT_EQ(first->load(key("s1")).size(), 2u);
  auto page = first->list("acme", "user:u1", 10, "");
  ASSERT_EQ(page->sessions.size(), 2u);
  EXPECT_EQ(page->sessions[0].session, "s3");
  EXPECT_EQ(page->sessions[1].session, "s1");
  EXPECT_EQ(first->load(key("theirs", "user:u2")).size(), 1u) << "another owner's count apart";
}

TEST_F(PostgresHistory, ManyReplicasStartingSessionsAtOnceKeepTheLimit) {
  Retention retention;
  retention.max_sessions_per_owner = 3;
  std::vector<std::unique_ptr<HistoryStore>> replicas;
  for (int i = 0; i < 4; ++i)
    replicas.push_back(replica(retention));
  std::vector<std::thread> writers;
  for (int i = 0; i < 4; ++i) {
    writers.emplace_back([&, i] {
      for (int j = 0; j < 5; ++j)
        replicas[i]->append(key("r" + std::to_string(i) + "-" + std::to_string(j)),
                            turn("hello", "x"), true);
    });
  }
  for (auto& writer : writers)
    writer.join();
  EXPECT_EQ(replicas[0]->list("acme", "user:u1", 50, "")->sessions.size(), 3u);
}

TEST_F(PostgresHistory, RemovingAnOwnerDeletesEveryOneOfItsSessionsAndNoOtherOwners) {
  auto store = replica();
  ASSERT_TRUE(store->append(key("a"), turn("one", "1"), true));
  ASSERT_TRUE(store->append(key("b"), turn("two", "2"), true));
  store->append(key("b"), turn("queued", "", TurnStatus::failed), false);
  ASSERT_TRUE(store->rename(key("a"), "Named"));
  ASSERT_TRUE(store->append(key("a", "user:u2"), turn("theirs", "x"), true));
  std::vector<std::string> removed = store->remove_owner("acme", "user:u1");
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{"a", "b"}));
  auto other = replica();
  EXPECT_TRUE(other->load(key("a")).empty());
  EXPECT_TRUE(other->load(key("b")).empty()) << "the queued turn did not come back";
  EXPECT_TRUE(other->list("acme", "user:u1", 10, "")->sessions.empty());
  EXPECT_EQ(other->load(key("a", "user:u2")).size(), 1u);
  ASSERT_TRUE(store->append(key("a"), turn("fresh", "y"), true));
  EXPECT_EQ(store->summary(key("a"))->title, "fresh") << "the old title went too";
  EXPECT_TRUE(store->remove_owner("acme", "user:nobody").empty());
}

// An outage the test switches on and off with the server up: while `down`, inserting a turn
// whose user message is "queued" fails as a lost connection would (SQLSTATE 08006), so the
// batch that holds it is kept and tried again, while everything else is written as usual. Each
// failed try takes a number from test_outage_tries (a sequence: not rolled back).
class PostgresHistoryOutage : public PostgresHistory {
 protected:
  void SetUp() override {
    PostgresHistory::SetUp();
    if (IsSkipped()) return;
    store_ = replica();  // its migrations make the table the trigger is on
    postgres::ClientOptions options;
    options.url = url_;
    admin_ = std::make_unique<postgres::Client>(options);
    admin_->exec("CREATE TABLE test_outage (down BOOLEAN NOT NULL)");
    admin_->exec("INSERT INTO test_outage VALUES (true)");
    admin_->exec("CREATE SEQUENCE test_outage_tries");
    admin_->exec(
        "CREATE FUNCTION test_outage_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF "
        "NEW.user_content = 'queued'::bytea AND (SELECT down FROM test_outage) THEN PERFORM "
        "nextval('test_outage_tries'); RAISE EXCEPTION 'the test took the server away' USING "
        "ERRCODE = '08006'; END IF; RETURN NEW; END $$");
    admin_->exec(
        "CREATE TRIGGER test_outage BEFORE INSERT ON history_turns FOR EACH ROW EXECUTE "
        "FUNCTION test_outage_insert()");
    ::testing::internal::CaptureStderr();  // the writer logs the outage
    capturing_ = true;
  }
  void TearDown() override {
    store_.reset();  // its writer's last lines go to the capture too
    if (capturing_) ::testing::internal::GetCapturedStderr();
  }

  int64_t failed_tries() {
    return admin_
        ->exec(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "
            "test_outage_tries")
        .integer(0, 0);
  }
  // Queues a turn whose batch then fails, and waits until it failed `tries` times (each wait
  // doubles: from 0.1 s).
  void queue_a_turn_that_waits(const SessionKey& session, int64_t tries = 1) {
    store_->append(session, turn("queued", "", TurnStatus::failed), /*durable=*/false);
    wait_for("the queued turn's batch to fail", [&] { return failed_tries() >= tries; });
  }
  // Ends the outage and waits until the writer is past the batch it kept: a turn queued behind
  // it is on the server.
  void end_the_outage_and_wait_for_the_writer() {
    admin_->exec("UPDATE test_outage SET down = false");
    store_->append(key("marker", "user:marker"), turn("after", "x"), /*durable=*/false);
    wait_for("the writer to write the kept batch",
             [&] { return replica()->load(key("marker", "user:marker")).size() == 1; });
  }
  static void wait_for(const char* what, const std::function<bool()>& done) {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done()) {
      ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "waited too long for " << what;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  static std::vector<std::string> users(const std::vector<Turn>& turns) {
    std::vector<std::string> all;
    for (const Turn& each : turns)
      all.push_back(each.user);
    return all;
  }

  std::unique_ptr<HistoryStore> store_;
  std::unique_ptr<postgres::Client> admin_;
  bool capturing_ = false;
};

// The session is deleted while the batch holding its queued turn waits to be tried again (the
// server answers the DELETE): when that batch is written, the turn must not bring it back.
TEST_F(PostgresHistoryOutage, ASessionDeletedWhileItsQueuedTurnWaitsStaysDeleted) {
  ASSERT_TRUE(store_->append(key("s1"), turn("one", "1"), true));
  ASSERT_TRUE(store_->append(key("s2"), turn("kept", "2"), true));
  queue_a_turn_that_waits(key("s1"));
  EXPECT_TRUE(store_->remove(key("s1")));
  end_the_outage_and_wait_for_the_writer();
  EXPECT_TRUE(replica()->load(key("s1")).empty()) << "the deleted session came back";
  EXPECT_EQ(replica()->load(key("s2")).size(), 1u);
  ASSERT_TRUE(store_->append(key("s1"), turn("new start", "ok"), true));
  EXPECT_EQ(users(replica()->load(key("s1"))), (std::vector<std::string>{"new start"}));
}

TEST_F(PostgresHistoryOutage, AnOwnerDeletedWhileItsQueuedTurnWaitsStaysDeleted) {
  ASSERT_TRUE(store_->append(key("a"), turn("one", "1"), true));
  ASSERT_TRUE(store_->append(key("a", "user:u2"), turn("theirs", "2"), true));
  queue_a_turn_that_waits(key("b"));
  store_->append(key("b", "user:u2"), turn("queued", "", TurnStatus::failed), false);
  std::vector<std::string> removed = store_->remove_owner("acme", "user:u1");
  EXPECT_EQ(removed, (std::vector<std::string>{"a"}));
  end_the_outage_and_wait_for_the_writer();
  EXPECT_TRUE(replica()->list("acme", "user:u1", 10, "")->sessions.empty())
      << "a deleted owner's session came back";
  EXPECT_EQ(replica()->load(key("b", "user:u2")).size(), 1u) << "another owner's turn is kept";
}

// A durable turn of a session whose earlier turn waits for the server is not written before it:
// while the server still fails, the durable one is refused (not kept); once it answers, the
// waiting turn is written at once and the durable one after it.
TEST_F(PostgresHistoryOutage, ADurableTurnNeverOvertakesItsSessionsQueuedTurn) {
  ASSERT_TRUE(store_->append(key("s1"), turn("one", "1"), true));
  queue_a_turn_that_waits(key("s1"), /*tries=*/3);
  EXPECT_FALSE(store_->append(key("s1"), turn("while down", "x"), true))
      << "written before the session's earlier turn";
  admin_->exec("UPDATE test_outage SET down = false");
  EXPECT_TRUE(store_->append(key("s1"), turn("after", "y"), true));
  EXPECT_EQ(users(replica()->load(key("s1"))),
            (std::vector<std::string>{"one", "queued", "after"}));
  EXPECT_EQ(store_->lost_turns(), 1) << "the refused durable turn";
}

}  // namespace
}  // namespace chatflow::history
