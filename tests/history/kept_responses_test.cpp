// The Responses API's kept responses in the history_store resource (kept_responses.h): a round
// trip through each store, owner scoping as for sessions, replacing, forgetting, a restart of
// the SQLite file, and the conversation's JSON (framework/responses) read back as it was.
#include "framework/history/kept_responses.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "framework/responses/response_store.h"
#include "stages/history_store.h"
#include "support/temp_model.h"

namespace chatflow {
namespace {

const KeptResponse kFirst{R"({"id":"resp_1","output_text":"Hello"})",
                          R"([{"role":"user","content":"Hi","tool_calls":[],"tool_call_id":""}])"};

std::vector<std::shared_ptr<HistoryStoreResource>> both_resources(const std::string& name) {
  return {std::make_shared<HistoryStoreResource>(history::make_memory_store()),
          std::make_shared<HistoryStoreResource>(
              history::make_sqlite_store(testing::fresh_path(name)))};
}

TEST(KeptResponses, AResponseIsReadBackByItsOwnerOnly) {
  for (auto& resource : both_resources("kept-owner.db")) {
    KeptResponses& kept = *resource;
    kept.keep_response("acme", "user:alice", "resp_1", kFirst);
    auto found = kept.kept_response("acme", "user:alice", "resp_1");
    ASSERT_TRUE(found);
    EXPECT_EQ(found->response_json, kFirst.response_json);
    EXPECT_EQ(found->conversation_json, kFirst.conversation_json);
    EXPECT_FALSE(kept.kept_response("acme", "user:bob", "resp_1")) << "another owner's id is none";
    EXPECT_FALSE(kept.kept_response("globex", "user:alice", "resp_1")) << "nor another tenant's";
    EXPECT_FALSE(kept.kept_response("acme", "user:alice", "resp_2"));
    EXPECT_FALSE(kept.forget_response("acme", "user:bob", "resp_1"));
    EXPECT_TRUE(kept.kept_response("acme", "user:alice", "resp_1")) << "bob could not delete it";
  }
}

TEST(KeptResponses, KeepingTheSameIdAgainReplacesItAndForgettingIsForGood) {
  for (auto& resource : both_resources("kept-replace.db")) {
    KeptResponses& kept = *resource;
    kept.keep_response("acme", "user:alice", "resp_1", kFirst);
    kept.keep_response("acme", "user:alice", "resp_1", {"{\"v\":2}", "[]"});
    EXPECT_EQ(kept.kept_response("acme", "user:alice", "resp_1")->response_json, "{\"v\":2}");
    EXPECT_TRUE(kept.forget_response("acme", "user:alice", "resp_1"));
    EXPECT_FALSE(kept.kept_response("acme", "user:alice", "resp_1"));
    EXPECT_FALSE(kept.forget_response("acme", "user:alice", "resp_1"));
  }
}

TEST(KeptResponses, TheSqliteFileKeepsThemThroughARestart) {
  std::string path = testing::fresh_path("kept-restart.db");
  {
    HistoryStoreResource resource(history::make_sqlite_store(path));
    resource.keep_response("acme", "user:alice", "resp_1", kFirst);
    resource.keep_response("acme", "user:alice", "resp_gone", kFirst);
    EXPECT_TRUE(resource.forget_response("acme", "user:alice", "resp_gone"));
  }
  HistoryStoreResource reopened(history::make_sqlite_store(path));
  auto found = reopened.kept_response("acme", "user:alice", "resp_1");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->response_json, kFirst.response_json);
  EXPECT_FALSE(reopened.kept_response("acme", "user:alice", "resp_gone"));
  EXPECT_FALSE(reopened.kept_response("acme", "user:bob", "resp_1"));
}

TEST(KeptResponses, AFileWrittenBeforeResponsesGainsTheirTable) {
  std::string path = testing::fresh_path("kept-old.db");
  sqlite3* database = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &database), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(database,
                         "CREATE TABLE turns (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, owner "
                         "TEXT NOT NULL DEFAULT '', session TEXT NOT NULL, time INTEGER NOT NULL, "
                         "user TEXT NOT NULL, assistant TEXT NOT NULL, status TEXT NOT NULL, "
                         "prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(database);
  HistoryStoreResource resource(history::make_sqlite_store(path));
  resource.keep_response("acme", "user:alice", "resp_1", kFirst);
  EXPECT_TRUE(resource.kept_response("acme", "user:alice", "resp_1"));
}

TEST(KeptResponses, AConversationsJsonReadsBackAsItWas) {
  std::vector<Message> conversation = {
      Message("user", "What is the weather in \"Paris\"?\n"),
      Message("assistant", "", {{"call_1", "get_weather", R"({"city":"Paris"})"}}),
      Message("tool", "18 C", {}, "call_1"), Message("assistant", "It is 18 C.")};
  auto back = responses::conversation_of_json(responses::conversation_json(conversation));
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 4u);
  EXPECT_EQ((*back)[0].content, conversation[0].content);
  ASSERT_EQ((*back)[1].tool_calls.size(), 1u);
  EXPECT_EQ((*back)[1].tool_calls[0].id, "call_1");
  EXPECT_EQ((*back)[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ((*back)[1].tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ((*back)[2].role, "tool");
  EXPECT_EQ((*back)[2].tool_call_id, "call_1");
  EXPECT_EQ((*back)[3].content, "It is 18 C.");
  EXPECT_FALSE(responses::conversation_of_json("{}"));
  EXPECT_FALSE(responses::conversation_of_json(R"([{"role":"user"}])"));
}

TEST(KeptResponses, DeletingAllOfAnOwnersSessionsDeletesTheirKeptResponsesToo) {
  for (auto& resource : both_resources("kept-delete-all.db")) {
    resource->keep_response("acme", "user:alice", "resp_1", kFirst);
    resource->keep_response("acme", "user:bob", "resp_2", kFirst);
    history::Turn turn;
    turn.user = "Hi";
    turn.assistant = "Hello";
    ASSERT_TRUE(resource->append_turn({"acme", "user:alice", "s1"}, turn, 0, true));
    EXPECT_EQ(resource->delete_sessions("acme", "user:alice"), 1);
    EXPECT_FALSE(resource->kept_response("acme", "user:alice", "resp_1"));
    EXPECT_TRUE(resource->kept_response("acme", "user:bob", "resp_2")) << "another owner's stays";
  }
}

TEST(KeptResponses, AnOwnerKeepsTheNewestUpToTheLimit) {
  history::Retention limits;
  limits.max_responses_per_owner = 3;
  std::vector<std::unique_ptr<history::HistoryStore>> stores;
  stores.push_back(history::make_memory_store(limits));
  stores.push_back(history::make_sqlite_store(testing::fresh_path("kept-limit.db"), limits));
  for (auto& store : stores) {
    // Kept a second apart, oldest first; the newest last, in the same second as the one before.
    for (int i = 1; i <= 5; ++i)
      store->keep_response({"acme", "user:alice", "resp_" + std::to_string(i)}, kFirst,
                           1000 + std::min(i, 4));
    store->keep_response({"acme", "user:bob", "resp_b"}, kFirst, 1);
    EXPECT_FALSE(store->kept_response({"acme", "user:alice", "resp_1"}));
    EXPECT_FALSE(store->kept_response({"acme", "user:alice", "resp_2"}));
    for (int i = 3; i <= 5; ++i)
      EXPECT_TRUE(store->kept_response({"acme", "user:alice", "resp_" + std::to_string(i)})) << i;
    EXPECT_TRUE(store->kept_response({"acme", "user:bob", "resp_b"})) << "bob's are counted apart";
  }
}

}  // namespace
}  // namespace chatflow
