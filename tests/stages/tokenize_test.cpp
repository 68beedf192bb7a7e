// The tokenize stage: the request's prompt as token ids. Chat messages go through the model's chat
// template (a Jinja file written here, so the rendering is known to the character), control tokens
// count only where the template wrote them, a completion prompt is encoded as it is, and the
// count becomes the prompt's usage. echo answers after it, so no model runs and the request shows
// what tokenize left on it.
#include <algorithm>

#include <gtest/gtest.h>

#include "stages/gguf_model.h"
#include "support/pipeline_helpers.h"
#include "support/scripted_stream.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

std::string model_path() {
  engine::ModelShape shape;
  shape.layers = 1;
  shape.ffn = 96;
  shape.context = 512;
  return temp_model(shape);
}

// Each message as <role>content</s> (the vocabulary's control token </s> after each one), then
// the assistant's opening.
const char* const kTemplate =
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

std::string pipeline_yaml(const std::string& tokenize_config = "{model: llm}") {
  return "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() +
         "\", chat_template: \"" + write_temp_file("tokenize-template.jinja", kTemplate) +
         "\"}\nstages:\n  - {name: tokenize, type: tokenize, config: " + tokenize_config +
         "}\n  - {name: echo, type: echo}\n";
}

std::shared_ptr<Request> run(Pipeline& pipeline, std::shared_ptr<Request> request) {
  auto sink = std::make_shared<CollectingSink>();
  request->sink = sink;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return request;
}

std::shared_ptr<Request> chat(std::vector<Message> messages) {
  auto request = std::make_shared<Request>();
  request->messages = std::move(messages);
  return request;
}

// The prompt's tokens as text, control tokens spelled out. A SentencePiece vocabulary puts a
// space before the text that follows a control token, as llama.cpp does.
std::string prompt_text(Pipeline& pipeline, const Request& request) {
  auto model = std::static_pointer_cast<GgufModel>(pipeline.resource("llm"));
  std::vector<engine::TokenId> ids(request.prompt_tokens.begin(), request.prompt_tokens.end());
  return model->tokenizer().decode(ids, /*special=*/true);
}

int64_t count_of(const std::vector<int32_t>& tokens, int32_t token) {
  return std::count(tokens.begin(), tokens.end(), token);
}

TEST(Tokenize, ChatMessagesGoThroughTheModelsChatTemplate) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, chat({{"system", "be brief"}, {"user", "hi"}}));
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(prompt_text(*pipeline, *request), "<s> <system>be brief</s> <user>hi</s> <assistant>");
}

TEST(Tokenize, AddGenerationPromptFalseLeavesTheAssistantTurnUnopened) {
  auto pipeline =
      build_yaml(pipeline_yaml("{model: llm, add_generation_prompt: false}"), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, chat({{"user", "hi"}}));
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(prompt_text(*pipeline, *request), "<s> <user>hi</s>");
}

// A user who writes "</s>" gets the characters, not the end-of-sequence token: only the
// template's own "</s>" is the control token.
TEST(Tokenize, ControlTokensCountOnlyWhereTheTemplateWroteThem) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, chat({{"user", "a</s>b"}}));
  ASSERT_FALSE(request->error()) << request->error()->message;
  auto model = std::static_pointer_cast<GgufModel>(pipeline->resource("llm"));
  EXPECT_EQ(count_of(request->prompt_tokens, model->tokenizer().vocabulary().eos), 1);
  EXPECT_EQ(prompt_text(*pipeline, *request), "<s> <user>a</s>b</s> <assistant>");
}

TEST(Tokenize, ACompletionPromptIsEncodedAsItIsWithoutTheTemplate) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = std::make_shared<Request>();
  request->kind = RequestKind::completion;
  request->prompt = "the robot</s> said";
  run(*pipeline, request);
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(prompt_text(*pipeline, *request), "<s> the robot</s> said");
  auto model = std::static_pointer_cast<GgufModel>(pipeline->resource("llm"));
  EXPECT_EQ(count_of(request->prompt_tokens, model->tokenizer().vocabulary().eos), 0)
      << "control-token text in a completion prompt is plain text";
}

TEST(Tokenize, ThePromptsTokenCountIsItsUsage) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, chat({{"user", "how many tokens is this?"}}));
  ASSERT_FALSE(request->error()) << request->error()->message;
  ASSERT_GT(request->prompt_tokens.size(), 20u);
  EXPECT_EQ(request->usage.prompt_tokens, static_cast<int64_t>(request->prompt_tokens.size()));
}

// deepseek's reasoning format with a template that opens the thinking block itself (as
// DeepSeek-R1's does): the answer starts inside it, which detokenize needs to know. (A scripted
// stream ends these pipelines: echo would set the split itself.)
TEST(Tokenize, APromptEndingInsideThinkingMarksTheRequestForTheReasoningSplit) {
  std::string thinking_template =
      write_temp_file("tokenize-thinking.jinja",
                      "{% for m in messages %}{{ m.content }}{% endfor %}<assistant><think>\n");
  auto split_with = [&](const std::string& reasoning_format) {
    auto pipeline = build_yaml("version: 1\nresources:\n  llm: {type: gguf_model, path: \"" +
                                   model_path() + "\", chat_template: \"" + thinking_template +
                                   "\", reasoning_format: " + reasoning_format +
                                   "}\nstages:\n"
                                   "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                                   "  - {name: script, type: scripted_stream}\n",
                               registry_with_scripted_stream());
    auto request = chat({{"user", "think first"}});
    Chunk last;
    last.finish = FinishReason::stop;
    attach_script(*request, {{last}});
    EXPECT_TRUE(pipeline);
    if (pipeline) run(*pipeline, request);
    EXPECT_FALSE(request->error()) << request->error()->message;
    return request->reasoning;
  };
  Request::ReasoningSplit deepseek = split_with("deepseek");
  EXPECT_TRUE(deepseek.enabled);
  EXPECT_TRUE(deepseek.open_at_start);
  EXPECT_FALSE(split_with("none").enabled);
}

TEST(Tokenize, AnUnknownRoleIsA400NamingIt) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, chat({{"user", "hi"}, {"robot", "beep"}}));
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 400);
  EXPECT_EQ(request->error()->type, "invalid_request_error");
  EXPECT_EQ(request->error()->param, "messages");
  EXPECT_NE(request->error()->message.find("'robot'"), std::string::npos)
      << request->error()->message;
}

TEST(Tokenize, AChatWithoutMessagesIsA400) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, chat({}));
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 400);
  EXPECT_EQ(request->error()->param, "messages");
}

TEST(Tokenize, ModelMustNameAGgufModelResourceAtItsPlace) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nresources:\n  vectors: {type: embedder}\nstages:\n"
      "  - {name: tokenize, type: tokenize, config: {model: vectors}}\n"
      "  - {name: echo, type: echo}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_EQ(errors.rfind("test.yaml:5:54: error: stage 'tokenize' (tokenize): key 'model' needs a "
                         "resource of type gguf_model, but 'vectors' is of type embedder",
                         0),
            0u)
      << errors;
}

TEST(Tokenize, AMisspelledKeyIsRefusedWithTheOneMeant) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nresources:\n  llm: {type: gguf_model, path: model.gguf}\nstages:\n"
      "  - {name: tokenize, type: tokenize, config: {model: llm, add_generation_promt: false}}\n"
      "  - {name: echo, type: echo}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:5:"), std::string::npos) << errors;
  EXPECT_NE(errors.find("unknown key 'add_generation_promt'; did you mean "
                        "'add_generation_prompt'?"),
            std::string::npos)
      << errors;
}

}  // namespace
}  // namespace chatflow::testing
