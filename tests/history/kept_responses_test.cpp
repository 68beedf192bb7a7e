// The Responses API's kept responses in the history_store resource (kept_responses.h): a round
// trip through each store, owner scoping as for sessions, replacing, forgetting, a restart of
// the SQLite file, and the conversation's JSON (framework/responses) read back as it was.
#include "framework/history/kept_responses.h"

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
      Message("tool", "18 C", {}, "call_1"),
      Message("assistant", "It is 18 C.")};
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

}  // namespace
}  // namespace chatflow
