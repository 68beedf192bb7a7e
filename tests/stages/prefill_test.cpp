// The prefill stage: the request's prompt goes into the model's scheduler and the request waits
// there; it moves on to decode only once its first token exists (that moment is the time to first
// token), and a request that can never fit the context is refused before anything runs. Over a
// random-weight model written by the test support.
#include <gtest/gtest.h>

#include "stages/gguf_model.h"
#include "support/pipeline_helpers.h"
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

const char* const kModelStages =
    "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
    "  - {name: prefill, type: prefill, config: {model: llm}}\n"
    "  - {name: decode, type: decode, config: {model: llm}}\n"
    "  - {name: detokenize, type: detokenize, config: {model: llm}}\n";

std::string pipeline_yaml(const std::string& model_settings = "",
                          const std::string& stages = kModelStages) {
  return "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() + "\"" +
         model_settings + "}\nstages:\n" + stages;
}

std::shared_ptr<Request> completion(const std::string& prompt, int64_t max_tokens,
                                    std::shared_ptr<CollectingSink>& sink) {
  auto request = std::make_shared<Request>();
  request->kind = RequestKind::completion;
  request->prompt = prompt;
  request->generation.temperature = 0;
  request->generation.max_tokens = max_tokens;
  request->generation.ignore_eos = true;
  sink = std::make_shared<CollectingSink>();
  request->sink = sink;
  return request;
}

std::shared_ptr<Request> run(Pipeline& pipeline, const std::string& prompt, int64_t max_tokens) {
  std::shared_ptr<CollectingSink> sink;
  auto request = completion(prompt, max_tokens, sink);
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return request;
}

TEST(Prefill, TheRequestMovesOnToDecodeOnlyOnceItsFirstTokenExists) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, "the little robot", 4);
  ASSERT_FALSE(request->error()) << request->error()->message;
  const GenerationTimes& times = request->generation_times;
  ASSERT_GT(times.queued_ns.load(), 0);
  ASSERT_GT(times.first_token_ns.load(), 0);
  EXPECT_LE(times.queued_ns.load(), times.scheduled_ns.load());
  EXPECT_LE(times.scheduled_ns.load(), times.first_token_ns.load());
  std::vector<StageTiming> timings = request->stage_timings();
  ASSERT_EQ(timings.size(), 4u);
  const StageTiming& prefill = timings[1];
  const StageTiming& decode = timings[2];
  EXPECT_LE(prefill.first_start_ns, times.queued_ns.load()) << "prefill queued the prompt";
  EXPECT_GE(decode.first_start_ns, times.first_token_ns.load())
      << "decode ran before the first token existed";
}

// Refused at prefill with the code clients look for: a prompt longer than the context, and a
// short prompt whose max_tokens cannot fit beside it.
TEST(Prefill, ARequestThatCannotFitTheContextIsA400ContextLengthExceeded) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::string long_prompt;
  for (int i = 0; i < 300; ++i)
    long_prompt += " the";  // one token each; the context is 256
  for (auto [prompt, max_tokens] :
       {std::pair<std::string, int64_t>{long_prompt, 1}, {"hello", 1000}}) {
    auto request = run(*pipeline, prompt, max_tokens);
    ASSERT_TRUE(request->error()) << "max_tokens " << max_tokens;
    EXPECT_EQ(request->error()->status, 400);
    EXPECT_EQ(request->error()->type, "invalid_request_error");
    EXPECT_EQ(request->error()->code, "context_length_exceeded");
    EXPECT_EQ(request->generation_times.queued_ns.load(), 0) << "nothing was queued";
  }
}

TEST(Prefill, WithoutTokenizeBeforeItTheRequestIsA500NamingTheMissingStage) {
  auto pipeline = build_yaml(pipeline_yaml("",
                                           "  - {name: prefill, type: prefill, config: {model: "
                                           "llm}}\n  - {name: decode, type: decode, config: "
                                           "{model: llm}}\n"),
                             builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, "the little robot", 4);
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 500);
  EXPECT_NE(request->error()->message.find("needs a tokenize stage before it"), std::string::npos)
      << request->error()->message;
}

// A tokenizer_only model counts tokens for gates in front of an upstream engine; it has no
// weights to generate with.
TEST(Prefill, ATokenizerOnlyModelRefusesToGenerate) {
  auto pipeline = build_yaml(pipeline_yaml(", tokenizer_only: true"), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = run(*pipeline, "the little robot", 4);
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 500);
  EXPECT_EQ(request->error()->code, "tokenizer_only_model");
}

TEST(Prefill, AnUndeclaredModelIsRefusedAtItsPlaceWithTheDeclaredOnes) {
  Diagnostics diagnostics;
  check_yaml(pipeline_yaml("",
                           "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                           "  - {name: prefill, type: prefill, config: {model: lm}}\n"
                           "  - {name: decode, type: decode, config: {model: llm}}\n"),
             builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:6:52: error: stage 'prefill' (prefill): key 'model' names "
                        "resource 'lm', which is not declared under 'resources:'; did you mean "
                        "'llm'? (declared gguf_model resources: llm)"),
            std::string::npos)
      << errors;
}

}  // namespace
}  // namespace chatflow::testing
