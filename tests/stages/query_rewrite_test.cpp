// The query_rewrite stage: a follow-up question is rewritten by the model into a standalone one,
// for retrieval only. The side conversation the model is asked is checked as text; what the model
// answers is checked against the engine used directly on that conversation (a random-weight
// model writes no sensible question, but its greedy answer is fixed). echo answers after the
// stage; the request shows the question retrieval would use. (retrieval_test.cpp's
// RetrievalStages runs it in front of hybrid_retrieval with the default settings.)
#include "stages/query_rewrite.h"

#include <gtest/gtest.h>

#include "framework/engine/generator.h"
#include "stages/gguf_model.h"
#include "stages/retrieval_index.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

std::string model_path() {
  engine::ModelShape shape;  // the writer's defaults otherwise
  shape.layers = 1;
  shape.ffn = 96;
  shape.context = 1024;
  return temp_model(shape);
}

const char* const kDefaultInstructions =
    "Rewrite the newest question so that it can be understood without the conversation: replace "
    "pronouns and references with what they stand for. Reply with the question only.";

const std::vector<Message> kFollowUp = {{"system", "You are the office assistant."},
                                        {"user", "when does the office open?"},
                                        {"assistant", "At 9."},
                                        {"user", "and on Sundays?"}};

std::unique_ptr<Pipeline> rewriting(const std::string& config = "") {
  return build_yaml("version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() +
                        "\"}\nstages:\n  - {name: rewrite, type: query_rewrite, config: {model: "
                        "llm" +
                        config + "}}\n  - {name: echo, type: echo}\n",
                    builtin_registry());
}

std::shared_ptr<Request> run(Pipeline& pipeline, std::shared_ptr<Request> request) {
  auto sink = std::make_shared<CollectingSink>();
  request->sink = sink;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  EXPECT_FALSE(request->error()) << request->error()->message;
  return request;
}

std::shared_ptr<Request> chat(std::vector<Message> messages) {
  auto request = std::make_shared<Request>();
  request->messages = std::move(messages);
  return request;
}

// What the stage should make of the model's answer: its first line, trimmed.
std::string expected_rewrite(const std::string& instructions, int64_t max_tokens) {
  GgufModelConfig settings;
  settings.path = model_path();
  GgufModel model(settings);
  Request side;
  side.messages = rewrite_messages(kFollowUp, instructions, 600);
  engine::Generator generator(engine::Model::load(model_path()), 1);
  engine::GenerationRequest greedy;
  greedy.prompt = model.encode_prompt(side, true);
  greedy.sampling.temperature = 0;
  greedy.max_tokens = max_tokens;
  std::string text = generator.generate(greedy).text;
  text = text.substr(0, text.find('\n'));
  text.erase(0, text.find_first_not_of(" \t"));
  text.erase(text.find_last_not_of(" \t") + 1);
  return text;
}

TEST(QueryRewrite, TheSideConversationHoldsTheEarlierTurnsAndTheNewestQuestion) {
  std::vector<Message> side = rewrite_messages(kFollowUp, "Rewrite it.", 600);
  ASSERT_EQ(side.size(), 2u);
  EXPECT_EQ(side[0].role, "system");
  EXPECT_EQ(side[0].content, "Rewrite it.");
  EXPECT_EQ(side[1].role, "user");
  EXPECT_EQ(side[1].content,
            "Conversation:\nUser: when does the office open?\nAssistant: At 9.\n\n"
            "Newest question: and on Sundays?\n\nStandalone question:");
}

TEST(QueryRewrite, EarlierTurnsAreCutInTheSideConversation) {
  std::vector<Message> side = rewrite_messages(kFollowUp, "Rewrite it.", 4);
  EXPECT_EQ(side[1].content,
            "Conversation:\nUser: when\nAssistant: At 9\n\n"
            "Newest question: and on Sundays?\n\nStandalone question:");
}

// The model's greedy answer to the side conversation under the configured instructions, at most
// max_tokens long, is the question retrieval uses; the conversation stays the user's.
TEST(QueryRewrite, TheRewriteIsTheModelsAnswerUnderTheConfiguredInstructionsAndLength) {
  std::string expected = expected_rewrite("Say it again, alone.", 6);
  ASSERT_NE(expected, expected_rewrite(kDefaultInstructions, 48))
      << "the settings would make no difference";
  auto pipeline = rewriting(", max_tokens: 6, instructions: 'Say it again, alone.'");
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, chat(kFollowUp));
  auto rewritten = request->attachment<std::string>(kRetrievalQuery);
  if (expected.empty()) {
    EXPECT_FALSE(rewritten) << "an empty rewrite leaves the user's question";
  } else {
    ASSERT_TRUE(rewritten);
    EXPECT_EQ(*rewritten, expected);
    EXPECT_EQ(request->annotation("query_rewrite"), "rewritten");
  }
  ASSERT_EQ(request->messages.size(), kFollowUp.size());
  EXPECT_EQ(request->messages.back().content, "and on Sundays?");
}

// Nothing to rewrite: a completion, a single question (a system prompt is no turn), and a
// conversation that does not end with the user's question.
TEST(QueryRewrite, OnlyAChatEndingInAFollowUpQuestionIsRewritten) {
  auto pipeline = rewriting();
  ASSERT_TRUE(pipeline);
  auto completion = std::make_shared<Request>();
  completion->kind = RequestKind::completion;
  completion->prompt = "when does the office open? and on Sundays?";
  std::vector<std::shared_ptr<Request>> requests = {
      completion,
      chat({{"system", "You are the office assistant."}, {"user", "when does the office open?"}}),
      chat({{"user", "when does the office open?"}, {"assistant", "At 9."}}),
  };
  for (auto& request : requests) {
    run(*pipeline, request);
    EXPECT_FALSE(request->attachment<std::string>(kRetrievalQuery));
    EXPECT_FALSE(request->annotation("query_rewrite"));
  }
}

TEST(QueryRewrite, ModelMustNameAGgufModelResourceAtItsPlace) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nresources:\n  vectors: {type: embedder}\nstages:\n"
      "  - {name: rewrite, type: query_rewrite, config: {model: vectors}}\n"
      "  - {name: echo, type: echo}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_EQ(errors.rfind("test.yaml:5:58: error: stage 'rewrite' (query_rewrite): key 'model' "
                         "needs a resource of type gguf_model, but 'vectors' is",
                         0),
            0u)
      << errors;
}

TEST(QueryRewrite, MaxTokensMustBeBetween1And1024) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nresources:\n  llm: {type: gguf_model, path: model.gguf}\nstages:\n"
      "  - {name: rewrite, type: query_rewrite, config: {model: llm, max_tokens: 0}}\n"
      "  - {name: echo, type: echo}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:5:"), std::string::npos) << errors;
  EXPECT_NE(errors.find("key 'max_tokens' must be between 1 and 1024, got 0"), std::string::npos)
      << errors;
}

}  // namespace
}  // namespace chatflow::testing
