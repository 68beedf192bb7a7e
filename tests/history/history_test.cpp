#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <future>
#include <mutex>
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "framework/history/history_store.h"
#include "framework/history/trim.h"
#include "stages/gguf_model.h"
#include "support/temp_model.h"

namespace chatflow::history {
namespace {

SessionKey key(const std::string& tenant, const std::string& session,
               const std::string& owner = "user:u1") {
  return {tenant, owner, session};
}

TEST(HistoryStore, SqliteKeepsTurnsAcrossReopening) {
  std::string path = testing::fresh_path("history");
  {
    auto store = make_sqlite_store(path);
    EXPECT_TRUE(
        store->append(key("acme", "s1"), {"hi", "hello", TurnStatus::completed, 3, 4, 0}, true));
    store->append(key("acme", "s1"), {"and?", "", TurnStatus::cancelled, 5, 0, 0}, false);
    store->append(key("acme", "s2"), {"other", "session", TurnStatus::completed, 1, 1, 0}, false);
    store->append(key("globex", "s1"), {"same id", "other tenant", TurnStatus::completed, 1, 1, 0},
                  true);
    EXPECT_EQ(store->load(key("acme", "s1")).size(), 2u) << "queued turns are visible at once";
  }
  auto reopened = make_sqlite_store(path);
  auto turns = reopened->load(key("acme", "s1"));
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(turns[0].assistant, "hello");
  EXPECT_EQ(turns[0].status, TurnStatus::completed);
  EXPECT_EQ(turns[1].status, TurnStatus::cancelled);
  EXPECT_EQ(reopened->load(key("globex", "s1")).at(0).assistant, "other tenant");
  EXPECT_TRUE(reopened->load(key("acme", "nope")).empty());
}

TEST(HistoryStore, AnotherOwnersSessionOfTheSameIdIsAnotherSession) {
  std::vector<std::unique_ptr<HistoryStore>> stores;
  stores.push_back(make_memory_store());
  stores.push_back(make_sqlite_store(testing::fresh_path("owners")));
  for (auto& store : stores) {
    store->append(key("acme", "s1", "user:u1"), {"mine", "yes", TurnStatus::completed, 1, 1, 0},
                  true);
    store->append(key("acme", "s1", "key:k2"), {"theirs", "no", TurnStatus::completed, 1, 1, 0},
                  true);
    auto mine = store->load(key("acme", "s1", "user:u1"));
    ASSERT_EQ(mine.size(), 1u);
    EXPECT_EQ(mine[0].user, "mine");
    EXPECT_EQ(store->load(key("acme", "s1", "key:k2")).at(0).user, "theirs");
    EXPECT_TRUE(store->load(key("acme", "s1", "user:u2")).empty());
    EXPECT_TRUE(store->load(key("acme", "s1", "")).empty());
  }
}

TEST(HistoryStore, AFileFromBeforeOwnersIsMigratedAndItsTurnsBelongToNobody) {
  std::string path = testing::fresh_path("history-v1");
  {
    sqlite3* database = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &database), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(database,
                           "CREATE TABLE turns (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, "
                           "session TEXT NOT NULL, time INTEGER NOT NULL, user TEXT NOT NULL, "
                           "assistant TEXT NOT NULL, status TEXT NOT NULL, prompt_tokens INTEGER "
                           "NOT NULL, completion_tokens INTEGER NOT NULL);"
                           "INSERT INTO turns (tenant, session, time, user, assistant, status, "
                           "prompt_tokens, completion_tokens) VALUES "
                           "('acme', 's1', 1, 'old', 'turn', 'completed', 1, 1);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(database);
  }
  auto store = make_sqlite_store(path);
  EXPECT_TRUE(store->load(key("acme", "s1")).empty()) << "nobody reads an unowned turn as theirs";
  EXPECT_EQ(store->load(key("acme", "s1", "")).at(0).user, "old");
  EXPECT_TRUE(
      store->append(key("acme", "s1"), {"new", "turn", TurnStatus::completed, 1, 1, 0}, true));
  EXPECT_EQ(store->load(key("acme", "s1")).at(0).user, "new");
}

TEST(HistoryStore, ADamagedFileIsRefusedAtOpenNamingItsPath) {
  std::string path = testing::fresh_path("history-damaged");
  {
    auto store = make_sqlite_store(path);
    for (int i = 0; i < 200; ++i) {
      store->append(key("acme", "s" + std::to_string(i)),
                    {std::string(500, 'q'), std::string(500, 'a'), TurnStatus::completed, 1, 1, 0},
                    false);
    }
  }
  {
    // Overwrite pages in the middle of the file (after its header page) with noise.
    std::FILE* file = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(file, nullptr);
    std::fseek(file, 4096 * 3, SEEK_SET);
    std::string noise(4096 * 4, '\x5a');
    std::fwrite(noise.data(), 1, noise.size(), file);
    std::fclose(file);
  }
  try {
    make_sqlite_store(path);
    FAIL() << "a damaged history file was opened";
  } catch (const std::runtime_error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("damaged"), std::string::npos) << message;
  }
}

// A write that fails after the store opened (here: the file may not grow past its size, as on
// a full disk) is reported to a durable append and counted, never silently dropped.
TEST(HistoryStore, AFailedWriteIsReportedToTheDurableAppendAndCounted) {
  std::string path = testing::fresh_path("history-full");
  auto store = make_sqlite_store(path);
  ASSERT_TRUE(
      store->append(key("acme", "s1"), {"small", "turn", TurnStatus::completed, 1, 1, 0}, true));
  EXPECT_EQ(store->lost_turns(), 0);
  std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit capped = before;
  capped.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &capped), 0);
  bool saved = store->append(
      key("acme", "s1"), {std::string(1 << 20, 'x'), "big", TurnStatus::completed, 1, 1, 0}, true);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &before), 0);
  EXPECT_FALSE(saved);
  EXPECT_EQ(store->lost_turns(), 1);
  EXPECT_GT(store->last_failure_time(), 0);
  EXPECT_EQ(store->load(key("acme", "s1")).size(), 1u) << "the failed turn is not given back";
}

// Both backends, for the tests every store must pass alike.
std::vector<std::unique_ptr<HistoryStore>> both_stores(const std::string& name) {
  std::vector<std::unique_ptr<HistoryStore>> stores;
  stores.push_back(make_memory_store());
  stores.push_back(make_sqlite_store(testing::fresh_path(name)));
  return stores;
}

Turn said(const std::string& user, int64_t time = 0) {
  return {user, "answer", TurnStatus::completed, 1, 1, time};
}

std::vector<std::string> ids(const SessionPage& page) {
  std::vector<std::string> out;
  for (const auto& summary : page.sessions)
    out.push_back(summary.session);
  return out;
}

TEST(HistoryStore, ListsTheOwnersSessionsLatestActivityFirst) {
  for (auto& store : both_stores("list")) {
    store->append(key("acme", "a"), said("first of a", 100), true);
    store->append(key("acme", "b"), said("first of b", 200), true);
    store->append(key("acme", "c"), said("first of c", 200), true);
    store->append(key("acme", "a"), said("second of a", 300), true);  // a is the latest again
    store->append(key("acme", "theirs", "user:u2"), said("not mine"), true);
    store->append(key("globex", "d"), said("other tenant"), true);
    auto page = store->list("acme", "user:u1", 50, "");
    ASSERT_TRUE(page);
    EXPECT_EQ(ids(*page), (std::vector<std::string>{"a", "c", "b"}));
    EXPECT_FALSE(page->has_more);
    const SessionSummary& a = page->sessions[0];
    EXPECT_EQ(a.title, "first of a") << "the first user message, not the latest";
    EXPECT_EQ(a.created_at, 100);
    EXPECT_EQ(a.updated_at, 300);
    EXPECT_EQ(a.turns, 2);
    EXPECT_EQ(ids(*store->list("acme", "user:u2", 50, "")), (std::vector<std::string>{"theirs"}));
    EXPECT_TRUE(store->list("acme", "user:nobody", 50, "")->sessions.empty());
  }
}

TEST(HistoryStore, PagesContinueAfterTheLastIdEvenWithinOneSecond) {
  for (auto& store : both_stores("pages")) {
    for (int i = 0; i < 7; ++i)
      store->append(key("acme", "s" + std::to_string(i)), said("m", 1000), true);
    std::vector<std::string> seen;
    std::string after;
    int pages = 0;
    for (;;) {
      auto page = store->list("acme", "user:u1", 3, after);
      ASSERT_TRUE(page);
      ++pages;
      auto page_ids = ids(*page);
      seen.insert(seen.end(), page_ids.begin(), page_ids.end());
      EXPECT_EQ(page->has_more, pages < 3);
      if (!page->has_more) break;
      after = page_ids.back();
    }
    EXPECT_EQ(seen, (std::vector<std::string>{"s6", "s5", "s4", "s3", "s2", "s1", "s0"}));
    EXPECT_FALSE(store->list("acme", "user:u1", 3, "unknown")) << "an unknown cursor";
    EXPECT_FALSE(store->list("acme", "user:u2", 3, "s1")) << "another owner's session";
  }
}

TEST(HistoryStore, ARenamedTitleReplacesTheFirstMessageAndSurvivesReopening) {
  std::string path = testing::fresh_path("rename");
  {
    auto store = make_sqlite_store(path);
    store->append(key("acme", "s1"), said("What is the capital of France?"), true);
    auto renamed = store->rename(key("acme", "s1"), "Geography");
    ASSERT_TRUE(renamed);
    EXPECT_EQ(renamed->title, "Geography");
    EXPECT_EQ(renamed->turns, 1);
    EXPECT_FALSE(store->rename(key("acme", "nope"), "x")) << "no session, no title";
    EXPECT_FALSE(store->rename(key("acme", "s1", "user:u2"), "x")) << "another owner's";
    EXPECT_EQ(store->summary(key("acme", "s1", "user:u2")), std::nullopt);
  }
  auto reopened = make_sqlite_store(path);
  EXPECT_EQ(reopened->summary(key("acme", "s1"))->title, "Geography");
  EXPECT_EQ(reopened->list("acme", "user:u1", 10, "")->sessions.at(0).title, "Geography");
  EXPECT_FALSE(reopened->summary(key("acme", "nope")));
}

TEST(HistoryStore, ADeletedSessionIsGoneAndItsIdStartsAfresh) {
  for (auto& store : both_stores("delete")) {
    store->append(key("acme", "s1"), said("old question"), true);
    store->append(key("acme", "s1"), said("more"), false);  // queued, not yet committed
    store->rename(key("acme", "s1"), "Old");
    store->append(key("acme", "s2"), said("keep me"), true);
    EXPECT_FALSE(store->remove(key("acme", "s1", "user:u2"))) << "another owner's is none";
    EXPECT_TRUE(store->remove(key("acme", "s1")));
    EXPECT_FALSE(store->remove(key("acme", "s1")));
    EXPECT_TRUE(store->load(key("acme", "s1")).empty());
    EXPECT_FALSE(store->summary(key("acme", "s1")));
    EXPECT_EQ(ids(*store->list("acme", "user:u1", 10, "")), (std::vector<std::string>{"s2"}));
    store->append(key("acme", "s1"), said("new question"), true);
    EXPECT_EQ(store->load(key("acme", "s1")).size(), 1u);
    EXPECT_EQ(store->summary(key("acme", "s1"))->title, "new question") << "the old title went";
  }
}

TEST(HistoryStore, DeletedRowsLeaveTheFile) {
  std::string path = testing::fresh_path("delete-rows");
  {
    auto store = make_sqlite_store(path);
    store->append(key("acme", "s1"), said("secret"), true);
    store->rename(key("acme", "s1"), "Secret title");
    ASSERT_TRUE(store->remove(key("acme", "s1")));
  }
  sqlite3* database = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &database), SQLITE_OK);
  auto count = [&](const char* sql) {
    sqlite3_stmt* statement = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(database, sql, -1, &statement, nullptr), SQLITE_OK);
    EXPECT_EQ(sqlite3_step(statement), SQLITE_ROW);
    int rows = sqlite3_column_int(statement, 0);
    sqlite3_finalize(statement);
    return rows;
  };
  EXPECT_EQ(count("SELECT COUNT(*) FROM turns"), 0);
  EXPECT_EQ(count("SELECT COUNT(*) FROM session_titles"), 0);
  sqlite3_close(database);
}

// A file the previous version wrote (turns with owners, no titles table) opens, lists and
// takes titles.
TEST(HistoryStore, AFileFromBeforeTitlesIsMigrated) {
  std::string path = testing::fresh_path("history-v2");
  {
    sqlite3* database = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &database), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(database,
                           "PRAGMA journal_mode=WAL;"
                           "CREATE TABLE turns (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, "
                           "owner TEXT NOT NULL DEFAULT '', session TEXT NOT NULL, time INTEGER "
                           "NOT NULL, user TEXT NOT NULL, assistant TEXT NOT NULL, status TEXT "
                           "NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER "
                           "NOT NULL);"
                           "CREATE INDEX turns_owner_session ON turns (tenant, owner, session, "
                           "id);"
                           "INSERT INTO turns (tenant, owner, session, time, user, assistant, "
                           "status, prompt_tokens, completion_tokens) VALUES "
                           "('acme', 'user:u1', 'old', 5, 'An old   question', 'a', 'completed', "
                           "1, 1);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(database);
  }
  auto store = make_sqlite_store(path);
  auto page = store->list("acme", "user:u1", 10, "");
  ASSERT_TRUE(page);
  ASSERT_EQ(page->sessions.size(), 1u);
  EXPECT_EQ(page->sessions[0].title, "An old question");
  EXPECT_EQ(page->sessions[0].created_at, 5);
  ASSERT_TRUE(store->rename(key("acme", "old"), "Renamed"));
  EXPECT_EQ(store->summary(key("acme", "old"))->title, "Renamed");
  EXPECT_EQ(store->load(key("acme", "old")).size(), 1u);
}

int64_t now() {
  return static_cast<int64_t>(std::time(nullptr));
}

// Both backends with the same retention.
std::vector<std::unique_ptr<HistoryStore>> both_stores(const std::string& name,
                                                       Retention retention) {
  std::vector<std::unique_ptr<HistoryStore>> stores;
  stores.push_back(make_memory_store(retention));
  stores.push_back(make_sqlite_store(testing::fresh_path(name), retention));
  return stores;
}

TEST(HistoryRetention, LoadRecentGivesTheNewestTurnsOldestFirst) {
  for (auto& store : both_stores("recent")) {
    for (const char* user : {"a", "b", "c"})
      store->append(key("acme", "s1"), said(user), true);
    store->append(key("acme", "s1"), said("queued"), false);
    std::vector<Turn> recent = store->load_recent(key("acme", "s1"), 2);
    ASSERT_EQ(recent.size(), 2u);
    EXPECT_EQ(recent[0].user, "c");
    EXPECT_EQ(recent[1].user, "queued");
    EXPECT_EQ(store->load_recent(key("acme", "s1"), 0).size(), 4u);
    EXPECT_EQ(store->load_recent(key("acme", "s1"), 9).size(), 4u);
  }
}

TEST(HistoryRetention, ExpiredTurnsAreNeverReadAndTheSweepDeletesThem) {
  Retention retention;
  retention.ttl_days = 1;
  for (auto& store : both_stores("ttl", retention)) {
    int64_t two_days_ago = now() - 2 * 86400;
    store->append(key("acme", "s1"), said("old", two_days_ago), true);
    store->append(key("acme", "s1"), said("new"), true);
    store->append(key("acme", "gone"), said("forgotten", two_days_ago), true);
    store->append(key("acme", "queued"), said("late", two_days_ago), false);
    std::vector<Turn> seen = store->load(key("acme", "s1"));
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].user, "new");
    EXPECT_TRUE(store->load(key("acme", "gone")).empty());
    EXPECT_TRUE(store->load(key("acme", "queued")).empty()) << "queued but expired";
    EXPECT_FALSE(store->summary(key("acme", "gone")));
    EXPECT_FALSE(store->rename(key("acme", "gone"), "x")) << "an expired session is none";
    EXPECT_EQ(ids(*store->list("acme", "user:u1", 10, "")), std::vector<std::string>{"s1"});
    EXPECT_EQ(store->summary(key("acme", "s1"))->turns, 1);
    store->sweep(now());
    EXPECT_EQ(store->sweep(now()).expired_turns, 0) << "nothing left to expire";
    EXPECT_EQ(store->load(key("acme", "s1")).size(), 1u);
  }
}

// The sweep deletes expired rows from the file, and the title of a session left without a turn:
// the session's id used again starts without it.
TEST(HistoryRetention, TheSweepDeletesExpiredRowsAndTheirTitlesFromTheFile) {
  Retention retention;
  retention.ttl_days = 1;
  std::string path = testing::fresh_path("ttl-title");
  {
    auto store = make_sqlite_store(path);  // no retention yet: the turns are kept
    store->append(key("acme", "s1"), said("old", now() - 2 * 86400), true);
    store->append(key("acme", "s2"), said("old too", now() - 3 * 86400), true);
    store->append(key("acme", "s2"), said("recent"), true);
    ASSERT_TRUE(store->rename(key("acme", "s1"), "Secret"));
  }
  auto store = make_sqlite_store(path, retention);
  SweepOutcome swept = store->sweep(now());
  EXPECT_EQ(swept.expired_turns, 2);
  EXPECT_EQ(swept.evicted_sessions, 0);
  {
    sqlite3* database = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &database), SQLITE_OK);
    auto count = [&](const char* sql) {
      sqlite3_stmt* statement = nullptr;
      EXPECT_EQ(sqlite3_prepare_v2(database, sql, -1, &statement, nullptr), SQLITE_OK);
      EXPECT_EQ(sqlite3_step(statement), SQLITE_ROW);
      int rows = sqlite3_column_int(statement, 0);
      sqlite3_finalize(statement);
      return rows;
    };
    EXPECT_EQ(count("SELECT COUNT(*) FROM turns"), 1);
    EXPECT_EQ(count("SELECT COUNT(*) FROM session_titles"), 0);
    sqlite3_close(database);
  }
  store->append(key("acme", "s1"), said("a new start"), true);
  EXPECT_EQ(store->summary(key("acme", "s1"))->title, "a new start");
}

// The first sweep of a large file (ttl_days just set): its expired turns go a chunk at a time,
// and between chunks the store serves reads and writes. Here the sweep stands still after its
// first chunk until a read, a listing and a durable turn went through.
TEST(HistoryRetention, TheSqliteSweepDeletesInChunksAndTheStoreServesBetweenThem) {
  Retention retention;
  retention.ttl_days = 1;
  std::mutex mutex;
  std::condition_variable changed;
  int pauses = 0;
  bool may_go_on = false;
  SqliteSweepOptions sweep;
  sweep.chunk_turns = 10;
  sweep.between_chunks = [&] {
    std::unique_lock lock(mutex);
    if (++pauses > 1) return;
    changed.notify_all();
    changed.wait(lock, [&] { return may_go_on; });
  };
  auto store = make_sqlite_store(testing::fresh_path("chunks"), retention, sweep);
  // One owner each: an old turn starting an owner's session would clear that owner's expired
  // turns itself.
  for (int i = 0; i < 35; ++i) {
    store->append(key("acme", "old", "user:" + std::to_string(i)), said("old", now() - 2 * 86400),
                  false);
  }
  ASSERT_TRUE(store->append(key("acme", "live"), said("before"), true));
  auto swept = std::async(std::launch::async, [&] { return store->sweep(now()); });
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(20), [&] { return pauses > 0; }));
  }
  auto served = std::async(std::launch::async, [&] {
    bool appended = store->append(key("acme", "live"), said("during"), true);
    return appended && store->load(key("acme", "live")).size() == 2 &&
           ids(*store->list("acme", "user:u1", 10, "")) == std::vector<std::string>{"live"};
  });
  bool in_between = served.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  {
    std::lock_guard lock(mutex);
    may_go_on = true;
  }
  changed.notify_all();
  EXPECT_TRUE(in_between) << "the store waited for the whole sweep";
  EXPECT_TRUE(served.get());
  EXPECT_EQ(swept.get().expired_turns, 35);
  EXPECT_EQ(pauses, 3) << "chunks of 10, 10, 10 and 5";
  EXPECT_EQ(store->load(key("acme", "live")).size(), 2u);
}

TEST(HistoryRetention, StartingASessionPastTheOwnersLimitEvictsTheLeastRecentlyActive) {
  Retention retention;
  retention.max_sessions_per_owner = 2;
  for (auto& store : both_stores("limit", retention)) {
    std::vector<SessionKey> told;
    store->on_evicted([&](const std::vector<SessionKey>& keys) {
      told.insert(told.end(), keys.begin(), keys.end());
    });
    store->append(key("acme", "s1"), said("one"), true);
    store->append(key("acme", "s2"), said("two"), true);
    store->append(key("acme", "s1"), said("one again"), true);  // s2 is the oldest now
    store->append(key("acme", "s1", "user:u2"), said("another owner"), true);
    EXPECT_TRUE(told.empty());
    store->append(key("acme", "s3"), said("three"), true);
    ASSERT_EQ(told.size(), 1u);
    EXPECT_EQ(told[0], key("acme", "s2"));
    EXPECT_TRUE(store->load(key("acme", "s2")).empty());
    EXPECT_EQ(ids(*store->list("acme", "user:u1", 10, "")), (std::vector<std::string>{"s3", "s1"}));
    EXPECT_EQ(store->load(key("acme", "s1", "user:u2")).size(), 1u);
  }
}

TEST(HistoryRetention, TheSweepEvictsPastALoweredLimit) {
  std::string path = testing::fresh_path("lowered");
  {
    auto store = make_sqlite_store(path);
    for (const char* session : {"a", "b", "c", "d"})
      store->append(key("acme", session), said(session), true);
  }
  Retention retention;
  retention.max_sessions_per_owner = 1;
  auto store = make_sqlite_store(path, retention);
  std::vector<SessionKey> told;
  store->on_evicted([&](const std::vector<SessionKey>& keys) {
    told.insert(told.end(), keys.begin(), keys.end());
  });
  SweepOutcome swept = store->sweep(now());
  EXPECT_EQ(swept.evicted_sessions, 3);
  EXPECT_EQ(told.size(), 3u);
  EXPECT_EQ(ids(*store->list("acme", "user:u1", 10, "")), std::vector<std::string>{"d"});
}

TEST(HistoryRetention, RemovingAnOwnerDeletesAllItsSessionsAndNoOneElses) {
  for (auto& store : both_stores("owner")) {
    store->append(key("acme", "a"), said("one"), true);
    store->append(key("acme", "b"), said("two"), true);
    store->append(key("acme", "b"), said("queued"), false);
    store->rename(key("acme", "a"), "Named");
    store->append(key("acme", "a", "user:u2"), said("theirs"), true);
    store->append(key("globex", "a"), said("other tenant"), true);
    std::vector<std::string> removed = store->remove_owner("acme", "user:u1");
    std::sort(removed.begin(), removed.end());
    EXPECT_EQ(removed, (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(store->load(key("acme", "a")).empty());
    EXPECT_TRUE(store->load(key("acme", "b")).empty());
    EXPECT_TRUE(store->list("acme", "user:u1", 10, "")->sessions.empty());
    EXPECT_EQ(store->load(key("acme", "a", "user:u2")).size(), 1u);
    EXPECT_EQ(store->load(key("globex", "a")).size(), 1u);
    store->append(key("acme", "a"), said("fresh"), true);
    EXPECT_EQ(store->summary(key("acme", "a"))->title, "fresh") << "the old title went";
    EXPECT_TRUE(store->remove_owner("acme", "user:nobody").empty());
  }
}

// The budget rules against the real tokenizer and chat template of a made-up model, whose
// byte-level vocabulary makes a Chinese character several tokens.
class Trim : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::ModelShape shape;
    shape.context = 4096;
    GgufModelConfig settings;
    settings.path = testing::temp_model(shape);
    settings.chat_template = "chatml";
    model_ = std::make_shared<GgufModel>(settings);
  }
  int64_t count(const std::vector<Message>& messages) const {
    Request probe;
    probe.messages = messages;
    return static_cast<int64_t>(model_->encode_prompt(probe, true).size());
  }
  TrimOutcome trim(const std::vector<Message>& messages, int64_t budget) const {
    return trim_to_budget(messages, budget, [this](const auto& m) { return count(m); });
  }
  std::shared_ptr<GgufModel> model_;
};

std::vector<Message> conversation() {
  return {{"system", "You are terse."},        {"user", "first question"},
          {"assistant", "first answer"},       {"user", "第二个问题是关于中文的"},
          {"assistant", "第二个回答也是中文"}, {"user", "third question"},
          {"assistant", "third answer"},       {"user", "the newest question"}};
}

std::vector<Message> keep(const std::vector<Message>& all, size_t turns) {
  // System, the newest `turns` pairs, the newest question: built by hand for the expectation.
  std::vector<Message> out = {all[0]};
  for (size_t i = 7 - 2 * turns; i < 7; ++i)
    out.push_back(all[i]);
  out.push_back(all[7]);
  return out;
}

TEST_F(Trim, KeepsWholeTurnsNewestFirstWithinTheBudget) {
  auto all = conversation();
  for (size_t turns = 0; turns <= 3; ++turns) {
    int64_t exact = count(keep(all, turns));
    // A budget of exactly what `turns` turns need keeps them; one token less keeps fewer.
    TrimOutcome fits = trim(all, exact);
    EXPECT_EQ(fits.turns_kept, turns);
    EXPECT_EQ(fits.messages.size(), keep(all, turns).size());
    EXPECT_EQ(fits.messages.front().role, "system");
    EXPECT_EQ(fits.messages.back().content, "the newest question");
    EXPECT_LE(fits.tokens, exact);
    if (turns > 0) {
      TrimOutcome short_of = trim(all, exact - 1);
      EXPECT_EQ(short_of.turns_kept, turns - 1) << "budget " << exact - 1;
    }
  }
}

TEST_F(Trim, CountsTokensNotCharacters) {
  std::string chinese = "第二个问题是关于中文的";
  std::vector<Message> one = {{"user", chinese}};
  // 11 characters, 3 bytes each, one token per byte in this vocabulary.
  EXPECT_GT(count(one), 30);
  auto all = conversation();
  // A budget that would hold the Chinese turn if characters were tokens does not.
  int64_t without = count(keep(all, 1));
  TrimOutcome outcome = trim(all, without + 25);
  EXPECT_EQ(outcome.turns_kept, 1u) << "the Chinese turn needs more than 25 tokens";
}

TEST_F(Trim, RefusesWhenTheNewestMessageAloneIsTooLong) {
  auto all = conversation();
  int64_t minimum = count(keep(all, 0));
  try {
    trim(all, minimum - 1);
    FAIL() << "no error";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().status, 400);
    EXPECT_EQ(failure.error().code, "context_length_exceeded");
  }
}

}  // namespace
}  // namespace chatflow::history
