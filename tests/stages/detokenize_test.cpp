// The detokenize stage: token chunks become text deltas of whole UTF-8 characters, stop strings
// end the stream even when they span chunks, and a reasoning model's thinking moves into its own
// field. The tokens come from a scripted stream stage (so each chunk's ids are exactly what the
// test wrote) and are read with the vocabulary of a random-weight model written by the test
// support; the last test runs the real model stages end to end.
#include <thread>

#include <gtest/gtest.h>

#include "framework/engine/generator.h"
#include "stages/gguf_model.h"
#include "support/pipeline_helpers.h"
#include "support/scripted_stream.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

std::string model_path() {
  engine::ModelShape shape;  // the writer's defaults otherwise
  shape.ffn = 96;
  shape.context = 256;
  shape.type = kernels::TensorType::q8_0;
  return temp_model(shape);
}

std::string resources_yaml(const std::string& model_settings = "") {
  return "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() + "\"" +
         model_settings + "}\nstages:\n";
}

std::unique_ptr<Pipeline> scripted_pipeline() {
  return build_yaml(resources_yaml() +
                        "  - {name: script, type: scripted_stream}\n"
                        "  - {name: detokenize, type: detokenize, config: {model: llm}}\n",
                    registry_with_scripted_stream());
}

const engine::Vocabulary& vocabulary_of(Pipeline& pipeline) {
  return std::static_pointer_cast<GgufModel>(pipeline.resource("llm"))->tokenizer().vocabulary();
}

// The vocabulary's token for one character or piece (the test model has one for each printable
// ASCII character).
int32_t token(Pipeline& pipeline, const std::string& piece) {
  auto id = vocabulary_of(pipeline).find(piece);
  EXPECT_TRUE(id) << "no token '" << piece << "'";
  return id.value_or(0);
}

// One chunk per character of `text` (printable ASCII without spaces).
std::vector<Chunk> spelled(Pipeline& pipeline, const std::string& text) {
  std::vector<Chunk> chunks;
  for (char c : text)
    chunks.push_back(Chunk::delta("", {token(pipeline, std::string(1, c))}));
  return chunks;
}

int32_t byte_token(Pipeline& pipeline, uint8_t byte) {
  return vocabulary_of(pipeline).byte_token(byte).value();
}

Chunk tokens(std::vector<int32_t> ids) {
  return Chunk::delta("", std::move(ids));
}

Chunk final_chunk(FinishReason reason = FinishReason::length) {
  Chunk last;
  last.finish = reason;
  return last;
}

struct Played {
  std::shared_ptr<Request> request;
  std::vector<Chunk> chunks;
};

Played play(Pipeline& pipeline, StreamScript script,
            const std::function<void(Request&)>& prepare = {}) {
  auto sink = std::make_shared<CollectingSink>();
  auto request = std::make_shared<Request>();
  request->messages.push_back({"user", "hi"});
  request->sink = sink;
  if (prepare) prepare(*request);
  attach_script(*request, std::move(script));
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return {request, sink->chunks()};
}

std::vector<std::string> texts_of(const std::vector<Chunk>& chunks) {
  std::vector<std::string> texts;
  for (const auto& chunk : chunks)
    if (!chunk.text.empty()) texts.push_back(chunk.text);
  return texts;
}

// "é" is two byte-fallback tokens (C3 A9), here in two chunks: nothing is sent for the first.
TEST(Detokenize, ACharacterSplitOverTwoChunksComesOutWhole) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  Played played = play(
      *pipeline,
      {{tokens({token(*pipeline, "x")}), tokens({byte_token(*pipeline, 0xC3)}),
        tokens({byte_token(*pipeline, 0xA9)}), tokens({token(*pipeline, "y")}), final_chunk()}});
  ASSERT_FALSE(played.request->error()) << played.request->error()->message;
  EXPECT_EQ(texts_of(played.chunks), (std::vector<std::string>{"x", "\xC3\xA9", "y"}));
}

TEST(Detokenize, AnUnfinishedCharacterAtTheEndBecomesTheReplacementCharacter) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  Played played = play(
      *pipeline, {{tokens({token(*pipeline, "x"), byte_token(*pipeline, 0xC3)}), final_chunk()}});
  ASSERT_FALSE(played.request->error()) << played.request->error()->message;
  EXPECT_EQ(texts_of(played.chunks), (std::vector<std::string>{"x", "\xEF\xBF\xBD"}));
}

// Stop "bc" over chunks "a", "b", "c", "d": "b" is held until "c" shows it was the stop string;
// nothing from "bc" on is sent, the stream ends with "stop" and counts the tokens read.
TEST(Detokenize, AStopStringAcrossChunksEndsTheStreamBeforeIt) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  std::vector<Chunk> script = spelled(*pipeline, "abcd");
  script.push_back(final_chunk());
  Played played =
      play(*pipeline, {script}, [](Request& request) { request.generation.stop = {"bc"}; });
  ASSERT_FALSE(played.request->error()) << played.request->error()->message;
  EXPECT_EQ(texts_of(played.chunks), (std::vector<std::string>{"a"}));
  ASSERT_FALSE(played.chunks.empty());
  EXPECT_EQ(played.chunks.back().finish, FinishReason::stop);
  EXPECT_EQ(played.request->finish_reason(), FinishReason::stop);
  EXPECT_EQ(played.request->usage.completion_tokens, 3);
}

TEST(Detokenize, TheFinishReasonAndTheEnginesCountOfTheLastChunkAreTheAnswers) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  Chunk last = final_chunk(FinishReason::length);
  last.usage = Usage{12, 7, 0};
  Played played = play(*pipeline, {{tokens({token(*pipeline, "a"), token(*pipeline, "b")}), last}});
  ASSERT_FALSE(played.request->error()) << played.request->error()->message;
  EXPECT_EQ(played.request->finish_reason(), FinishReason::length);
  EXPECT_EQ(played.request->usage.completion_tokens, 7);
  ASSERT_TRUE(played.chunks.back().usage);
  EXPECT_EQ(played.chunks.back().usage->completion_tokens, 7);
}

// A chat whose answer splits reasoning (set by tokenize from the model's reasoning_format): the
// text between <think> and </think> is the chunks' reasoning, the rest their text.
TEST(Detokenize, ThinkingMovesIntoTheReasoningField) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  std::vector<Chunk> script = spelled(*pipeline, "<think>plan</think>answer");
  script.push_back(final_chunk(FinishReason::stop));
  Played played =
      play(*pipeline, {script}, [](Request& request) { request.reasoning.enabled = true; });
  ASSERT_FALSE(played.request->error()) << played.request->error()->message;
  std::string reasoning, text;
  for (const auto& chunk : played.chunks) {
    reasoning += chunk.reasoning;
    text += chunk.text;
  }
  EXPECT_EQ(reasoning, "plan");
  EXPECT_EQ(text, "answer");
}

TEST(Detokenize, LogprobsGetTheTextOfTheirTokens) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  int32_t x = token(*pipeline, "x");
  int32_t y = token(*pipeline, "y");
  Chunk chunk = tokens({x});
  chunk.logprobs.push_back({x, "", -0.25f, {{x, "", -0.25f, {}}, {y, "", -2.0f, {}}}});
  Played played = play(*pipeline, {{chunk, final_chunk()}});
  ASSERT_FALSE(played.request->error()) << played.request->error()->message;
  ASSERT_FALSE(played.chunks.empty());
  ASSERT_EQ(played.chunks[0].logprobs.size(), 1u);
  const TokenLogprob& logprob = played.chunks[0].logprobs[0];
  EXPECT_EQ(logprob.text, "x");
  ASSERT_EQ(logprob.top.size(), 2u);
  EXPECT_EQ(logprob.top[0].text, "x");
  EXPECT_EQ(logprob.top[1].text, "y");
}

TEST(Detokenize, ModelIsARequiredKey) {
  Diagnostics diagnostics;
  check_yaml(resources_yaml() +
                 "  - {name: script, type: scripted_stream}\n"
                 "  - {name: detokenize, type: detokenize, config: {}}\n",
             registry_with_scripted_stream(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:6:"), std::string::npos) << errors;
  EXPECT_NE(errors.find("stage 'detokenize' (detokenize): missing required key 'model'"),
            std::string::npos)
      << errors;
}

// Over the real model: the stop string ends the stream at it, and the engine drops the sequence
// (the closed stream tells it), freeing its blocks.
TEST(Detokenize, AStopStringEndsTheEnginesSequenceToo) {
  std::string path = model_path();
  auto model = engine::Model::load(path);
  engine::Generator generator(model, 1);
  engine::GenerationRequest direct;
  direct.prompt = model->tokenizer().encode("the little robot", true);
  direct.sampling.temperature = 0;
  direct.max_tokens = 30;
  direct.ignore_eos = true;
  std::string full = generator.generate(direct).text;
  // A random-weight model writes mostly stray bytes: stop on two plain letters it did write.
  size_t at = 4;
  auto plain = [&](size_t i) { return full[i] >= 'A' && full[i] <= 'z'; };
  while (at + 1 < full.size() && !(plain(at) && plain(at + 1)))
    ++at;
  ASSERT_LT(at + 1, full.size()) << "no two plain letters in " << full;
  std::string stop = full.substr(at, 2);
  auto pipeline = build_yaml(resources_yaml() +
                                 "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                                 "  - {name: prefill, type: prefill, config: {model: llm}}\n"
                                 "  - {name: decode, type: decode, config: {model: llm}}\n"
                                 "  - {name: detokenize, type: detokenize, config: {model: llm}}\n",
                             builtin_registry());
  ASSERT_TRUE(pipeline);
  auto sink = std::make_shared<CollectingSink>();
  auto request = std::make_shared<Request>();
  request->kind = RequestKind::completion;
  request->prompt = "the little robot";
  request->generation.temperature = 0;
  request->generation.max_tokens = 30;
  request->generation.ignore_eos = true;
  request->generation.stop = {stop};
  request->sink = sink;
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(sink->text(), full.substr(0, full.find(stop)));
  EXPECT_EQ(request->finish_reason(), FinishReason::stop);
  EXPECT_LT(request->usage.completion_tokens, 30);
  auto served = std::static_pointer_cast<GgufModel>(pipeline->resource("llm"));
  for (int i = 0; i < 2000 && served->stats().running > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(served->stats().running, 0) << "the engine dropped the stopped sequence";
  EXPECT_EQ(served->stats().sequence_blocks, 0);
}

}  // namespace
}  // namespace chatflow::testing
