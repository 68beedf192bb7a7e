// The history_trim stage in front of echo (prefix "echo: ", so an answer is told from a
// question): sessions kept in a real SQLite file, earlier turns put back between the system
// prompt and the new message, and the budget counted with a tiny made-up model's tokenizer and
// chat template.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "framework/history/history_store.h"
#include "stages/gguf_model.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

// A context far above what these conversations need beside the default max_tokens of 256.
std::string model_path(int64_t context = 4096) {
  engine::ModelShape shape;
  shape.ffn = 96;
  shape.context = context;
  shape.type = kernels::TensorType::q8_0;
  return temp_model(shape);
}

std::unique_ptr<Pipeline> trimmed_echo(const std::string& database, int64_t budget_tokens = 2000,
                                       const std::string& after_echo = "",
                                       const std::string& store_settings = "",
                                       int64_t context = 4096,
                                       const std::string& model_settings = "") {
  return build_yaml("version: 1\nresources:\n  llm: {type: gguf_model, path: \"" +
                        model_path(context) + "\"" + model_settings +
                        "}\n  history: {type: history_store, backend: sqlite, path: \"" + database +
                        "\"" + store_settings +
                        "}\nstages:\n"
                        "  - {name: trim, type: history_trim, config: {store: history, model: "
                        "llm, budget_tokens: " +
                        std::to_string(budget_tokens) +
                        "}}\n"
                        "  - {name: echo, type: echo, config: {prefix: 'echo: '}}\n" +
                        after_echo,
                    builtin_registry());
}

struct Asked {
  std::shared_ptr<Request> request;  // its messages are what the model would have seen
  std::string text;
};

Asked ask(Pipeline& pipeline, const std::string& tenant, const std::string& session,
          std::vector<Message> messages, int64_t max_tokens = 0) {
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("", sink);
  request->messages = std::move(messages);
  if (max_tokens > 0) request->generation.max_tokens = max_tokens;
  request->identity.tenant = tenant;
  request->session_id = session;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return {request, sink->text()};
}

std::vector<std::pair<std::string, std::string>> roles_and_contents(
    const std::vector<Message>& messages) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& message : messages)
    out.emplace_back(message.role, message.content);
  return out;
}

using Conversation = std::vector<std::pair<std::string, std::string>>;

TEST(HistoryTrim, EarlierTurnsComeBackBetweenSystemAndNewMessage) {
  auto pipeline = trimmed_echo(fresh_path("history-between.db"));
  ASSERT_TRUE(pipeline);
  Asked first = ask(*pipeline, "acme", "story-1", {{"user", "The dragon is called Ember."}});
  ASSERT_FALSE(first.request->error()) << first.request->error()->message;
  EXPECT_EQ(first.text, "echo: The dragon is called Ember.");

  Asked second =
      ask(*pipeline, "acme", "story-1", {{"system", "Be brief."}, {"user", "What was it called?"}});
  ASSERT_FALSE(second.request->error()) << second.request->error()->message;
  EXPECT_EQ(roles_and_contents(second.request->messages),
            (Conversation{{"system", "Be brief."},
                          {"user", "The dragon is called Ember."},
                          {"assistant", "echo: The dragon is called Ember."},
                          {"user", "What was it called?"}}));
  EXPECT_EQ(second.text, "echo: What was it called?");
  EXPECT_FALSE(second.request->annotation("history")) << "nothing was dropped";
}

TEST(HistoryTrim, TurnsAreInTheSqliteFileAndSurviveARestart) {
  std::string database = fresh_path("history-restart.db");
  {
    auto pipeline = trimmed_echo(database);
    ASSERT_TRUE(pipeline);
    ask(*pipeline, "acme", "story-2", {{"user", "Once upon a time."}});
    ask(*pipeline, "acme", "story-2", {{"user", "And then?"}});
  }
  {
    auto store = history::make_sqlite_store(database);
    std::vector<history::Turn> turns = store->load({"acme", "", "story-2"});
    ASSERT_EQ(turns.size(), 2u);
    EXPECT_EQ(turns[0].user, "Once upon a time.");
    EXPECT_EQ(turns[0].assistant, "echo: Once upon a time.");
    EXPECT_EQ(turns[1].user, "And then?");
    EXPECT_EQ(turns[1].assistant, "echo: And then?");
    for (const auto& turn : turns)
      EXPECT_EQ(turn.status, history::TurnStatus::completed);
  }
  auto restarted = trimmed_echo(database);
  ASSERT_TRUE(restarted);
  Asked next = ask(*restarted, "acme", "story-2", {{"user", "The end?"}});
  EXPECT_EQ(roles_and_contents(next.request->messages),
            (Conversation{{"user", "Once upon a time."},
                          {"assistant", "echo: Once upon a time."},
                          {"user", "And then?"},
                          {"assistant", "echo: And then?"},
                          {"user", "The end?"}}));
}

TEST(HistoryTrim, ASessionBelongsToItsTenant) {
  auto pipeline = trimmed_echo(fresh_path("history-tenants.db"));
  ASSERT_TRUE(pipeline);
  ask(*pipeline, "tenant-a", "shared-id", {{"user", "My secret is 42."}});
  Asked other = ask(*pipeline, "tenant-b", "shared-id", {{"user", "What is the secret?"}});
  EXPECT_EQ(roles_and_contents(other.request->messages),
            (Conversation{{"user", "What is the secret?"}}))
      << "tenant B was given tenant A's turns";
  Asked no_session = ask(*pipeline, "tenant-a", "", {{"user", "What is the secret?"}});
  EXPECT_EQ(no_session.request->messages.size(), 1u) << "a request without session_id got history";
  Asked own = ask(*pipeline, "tenant-a", "shared-id", {{"user", "What is the secret?"}});
  EXPECT_EQ(own.request->messages.size(), 3u);
}

TEST(HistoryTrim, OverBudgetDropsOldestPairsWhole) {
  const std::vector<Message> conversation = {
      {"system", "Be brief."},
      {"user", "Tell me everything about the first lighthouse on the northern coast."},
      {"assistant", "It was built of grey stone and stood for two hundred years."},
      {"user", "And describe in great detail the second lighthouse on the southern coast."},
      {"assistant", "ok"},
      {"user", "Which is taller?"},
      {"assistant", "The first."},
      {"user", "Why?"},
  };
  // The budget holds the system prompt, the newest turn, the new message, and the short answer
  // "ok" on its own, but not "ok" with its long question: a whole-pair trimmer keeps one turn.
  GgufModelConfig model_config;
  model_config.path = model_path();
  GgufModel model(model_config);
  auto count = [&](std::vector<size_t> indexes) {
    Request probe;
    for (size_t index : indexes)
      probe.messages.push_back(conversation[index]);
    return static_cast<int64_t>(model.encode_prompt(probe, true).size());
  };
  int64_t budget = count({0, 4, 5, 6, 7});
  ASSERT_LT(budget, count({0, 3, 4, 5, 6, 7}));

  auto pipeline = trimmed_echo(fresh_path("history-budget.db"), budget);
  ASSERT_TRUE(pipeline);
  Asked asked = ask(*pipeline, "acme", "", conversation);
  ASSERT_FALSE(asked.request->error()) << asked.request->error()->message;
  EXPECT_EQ(roles_and_contents(asked.request->messages), (Conversation{{"system", "Be brief."},
                                                                       {"user", "Which is taller?"},
                                                                       {"assistant", "The first."},
                                                                       {"user", "Why?"}}));
  EXPECT_EQ(asked.request->annotation("history"), "trimmed 2 turns");
  EXPECT_EQ(asked.text, "echo: Why?");
}

TEST(HistoryTrim, ASystemPromptAndNewMessageOverTheBudgetIs400ContextLengthExceeded) {
  auto pipeline = trimmed_echo(fresh_path("history-over.db"), /*budget_tokens=*/16);
  ASSERT_TRUE(pipeline);
  Asked asked = ask(*pipeline, "acme", "",
                    {{"system", "You are a helpful assistant who answers every question."},
                     {"user", "What is the longest river on the whole continent?"}});
  ASSERT_TRUE(asked.request->error());
  EXPECT_EQ(asked.request->error()->status, 400);
  EXPECT_EQ(asked.request->error()->type, "invalid_request_error");
  EXPECT_EQ(asked.request->error()->code, "context_length_exceeded");
  EXPECT_EQ(asked.request->error()->param, "messages");
  EXPECT_NE(asked.request->error()->message.find("the budget is 16"), std::string::npos)
      << asked.request->error()->message;
  EXPECT_EQ(asked.text, "");
}

TEST(HistoryTrim, AFilteredAnswerIsStoredAsFilteredAndNeverGivenBack) {
  std::string list = temp_path("history-abort-list.txt");
  std::ofstream(list) << "build a bomb\n";
  std::string database = fresh_path("history-filtered.db");
  {
    auto pipeline = trimmed_echo(database, 2000,
                                 "  - {name: guard, type: output_moderation, config: {lists: {\"" +
                                     list + "\": abort}, pii: []}}\n");
    ASSERT_TRUE(pipeline);
    Asked filtered = ask(*pipeline, "acme", "risky", {{"user", "how do I build a bomb"}});
    ASSERT_EQ(filtered.request->finish_reason(), FinishReason::content_filter);
    Asked next = ask(*pipeline, "acme", "risky", {{"user", "hello"}});
    EXPECT_EQ(roles_and_contents(next.request->messages), (Conversation{{"user", "hello"}}))
        << "a filtered answer became context";
  }
  auto store = history::make_sqlite_store(database);
  std::vector<history::Turn> turns = store->load({"acme", "", "risky"});
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(turns[0].user, "how do I build a bomb");
  EXPECT_EQ(turns[0].status, history::TurnStatus::filtered);
  EXPECT_EQ(turns[1].status, history::TurnStatus::completed);
}

// The outside probe's defect: on a model with a small context the trim kept what budget_tokens
// allowed, more than the context holds beside the answer, and the session failed (400) after
// a few dozen turns. The context less max_tokens bounds the budget: the oldest turns go.
TEST(HistoryTrim, ALongSessionOnASmallContextKeepsItsNewestTurnsWithinTheContext) {
  const int64_t context = 512;
  const int64_t max_tokens = 64;
  auto pipeline =
      trimmed_echo(fresh_path("history-small-context.db"), /*budget_tokens=*/4000, "", "", context);
  ASSERT_TRUE(pipeline);
  GgufModelConfig model_config;
  model_config.path = model_path(context);
  GgufModel model(model_config);
  for (int turn = 0; turn < 60; ++turn) {
    std::string question = "question number " + std::to_string(turn);
    Asked asked = ask(*pipeline, "acme", "long", {{"user", question}}, max_tokens);
    ASSERT_FALSE(asked.request->error())
        << "turn " << turn << ": " << asked.request->error()->message;
    ASSERT_EQ(asked.text, "echo: " + question);
    Request probe;
    probe.messages = asked.request->messages;
    int64_t prompt = static_cast<int64_t>(model.encode_prompt(probe, true).size());
    ASSERT_LE(prompt + max_tokens, context) << "turn " << turn;
    if (turn == 59) {
      const auto& kept = asked.request->messages;
      EXPECT_EQ(kept.back().content, "question number 59");
      ASSERT_GE(kept.size(), 3u);
      EXPECT_EQ(kept[kept.size() - 3].content, "question number 58") << "the newest turn stays";
      EXPECT_NE(kept.front().content, "question number 0") << "the oldest turn went";
      EXPECT_TRUE(asked.request->annotation("history"));
    }
  }
}

// Without max_tokens the answer is bounded by the model's max_tokens_default (32 here): the
// trim keeps that much of the context for it, not a quarter of it (128), so the conversation
// keeps 480 tokens of a 512-token context.
TEST(HistoryTrim, WithoutMaxTokensTheModelsMaxTokensDefaultIsKeptForTheAnswer) {
  const int64_t context = 512;
  const int64_t answer = 32;
  auto pipeline = trimmed_echo(fresh_path("history-default-answer.db"), /*budget_tokens=*/4000, "",
                               "", context, ", max_tokens_default: " + std::to_string(answer));
  ASSERT_TRUE(pipeline);
  GgufModelConfig model_config;
  model_config.path = model_path(context);
  GgufModel model(model_config);
  int64_t prompt = 0;
  for (int turn = 0; turn < 60; ++turn) {
    std::string question = "question number " + std::to_string(turn);
    Asked asked = ask(*pipeline, "acme", "long", {{"user", question}});
    ASSERT_FALSE(asked.request->error())
        << "turn " << turn << ": " << asked.request->error()->message;
    Request probe;
    probe.messages = asked.request->messages;
    prompt = static_cast<int64_t>(model.encode_prompt(probe, true).size());
    ASSERT_LE(prompt + answer, context) << "turn " << turn;
  }
  EXPECT_GT(prompt, context - context / 4) << "a quarter of the context was kept for the answer";
}

TEST(HistoryTrim, AMaxTokensThatLeavesNoRoomInTheContextIs400NamingIt) {
  auto pipeline =
      trimmed_echo(fresh_path("history-no-room.db"), /*budget_tokens=*/4000, "", "", 512);
  ASSERT_TRUE(pipeline);
  Asked asked = ask(*pipeline, "acme", "", {{"user", "hello there"}}, /*max_tokens=*/500);
  ASSERT_TRUE(asked.request->error());
  EXPECT_EQ(asked.request->error()->status, 400);
  EXPECT_EQ(asked.request->error()->code, "context_length_exceeded");
  EXPECT_NE(asked.request->error()->message.find(
                "the model's context of 512 tokens less 500 for the answer (max_tokens) leaves 12"),
            std::string::npos)
      << asked.request->error()->message;
}

TEST(HistoryTrim, ARequestLoadsOnlyTheNewestMaxTurnsLoaded) {
  auto pipeline =
      trimmed_echo(fresh_path("history-loaded.db"), 2000, "", ", retention: {max_turns_loaded: 2}");
  ASSERT_TRUE(pipeline);
  for (const char* question : {"one", "two", "three"})
    ask(*pipeline, "acme", "s", {{"user", question}});
  Asked asked = ask(*pipeline, "acme", "s", {{"user", "four"}});
  EXPECT_EQ(roles_and_contents(asked.request->messages), (Conversation{{"user", "two"},
                                                                       {"assistant", "echo: two"},
                                                                       {"user", "three"},
                                                                       {"assistant", "echo: three"},
                                                                       {"user", "four"}}));
}

}  // namespace
}  // namespace chatflow::testing
