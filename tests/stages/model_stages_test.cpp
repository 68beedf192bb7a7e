// The model stages as a pipeline runs them: tokenize -> prefill -> decode -> detokenize ->
// sse_emit over a real (random-weight) model, checked against the engine used directly, and the
// model's bound on an answer. What one stage does alone is in that stage's own test file.
#include <gtest/gtest.h>

#include "framework/api/served_model.h"
#include "framework/engine/backend.h"
#include "framework/engine/generator.h"
#include "support/pipeline_helpers.h"
#include "support/shared_data.h"
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

std::string pipeline_yaml(const std::string& path, const std::string& extra_resource_keys = "") {
  return "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + path + "\"" +
         extra_resource_keys +
         "}\nstages:\n"
         "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
         "  - {name: prefill, type: prefill, config: {model: llm}}\n"
         "  - {name: decode, type: decode, config: {model: llm}}\n"
         "  - {name: detokenize, type: detokenize, config: {model: llm}}\n"
         "  - {name: emit, type: sse_emit}\n";
}

std::shared_ptr<Request> completion(const std::string& prompt,
                                    std::shared_ptr<CollectingSink>& sink,
                                    int64_t max_tokens = 12) {
  auto request = std::make_shared<Request>();
  request->kind = RequestKind::completion;
  request->prompt = prompt;
  request->id = "cmpl-test";
  request->model = "test";
  request->generation.temperature = 0;
  request->generation.max_tokens = max_tokens;
  request->generation.ignore_eos = true;
  sink = std::make_shared<CollectingSink>();
  request->sink = sink;
  return request;
}

// The text the engine gives for `prompt` when used directly, without any pipeline.
std::string direct_text(const std::string& path, const std::string& prompt,
                        int64_t max_tokens = 12) {
  auto model = engine::Model::load(path);
  engine::Generator generator(model, 1);
  engine::GenerationRequest request;
  request.prompt = model->tokenizer().encode(prompt, true);
  request.sampling.temperature = 0;
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  return generator.generate(request).text;
}

TEST(ModelStages, PipelineTextEqualsTheEngineUsedDirectly) {
  std::string path = model_path();
  auto pipeline = build_yaml(pipeline_yaml(path), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(sink->text(), direct_text(path, "the little robot"));
  EXPECT_EQ(request->finish_reason(), FinishReason::length);
  EXPECT_EQ(request->usage.completion_tokens, 12);
  EXPECT_EQ(request->usage.prompt_tokens, static_cast<int64_t>(request->prompt_tokens.size()));
}

TEST(ModelStages, ConcurrentRequestsEachGetTheirOwnAnswerInOrder) {
  std::string path = model_path();
  auto pipeline = build_yaml(pipeline_yaml(path), builtin_registry());
  ASSERT_TRUE(pipeline);
  const std::vector<std::string> prompts = {"once",        "the sea was",    "a robot", "she said",
                                            "hello there", "in the morning", "x",       "why"};
  std::vector<std::shared_ptr<CollectingSink>> sinks(prompts.size());
  std::vector<std::shared_ptr<Request>> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back(completion(prompts[i], sinks[i], 20));
    ASSERT_EQ(pipeline->submit(requests.back()), Admission::accepted);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(sinks[i]->wait());
    EXPECT_EQ(sinks[i]->text(), direct_text(path, prompts[i], 20)) << prompts[i];
  }
}

TEST(ModelStages, SameTenantReusesThePrefixAnotherTenantDoesNot) {
  std::string path = model_path();
  auto pipeline = build_yaml(pipeline_yaml(path), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::string prompt =
      "the same long opening shared by both requests, long enough for several blocks of tokens";
  auto run = [&](const std::string& tenant) {
    std::shared_ptr<CollectingSink> sink;
    auto request = completion(prompt, sink, 4);
    request->identity.tenant = tenant;
    EXPECT_EQ(pipeline->submit(request), Admission::accepted);
    EXPECT_TRUE(sink->wait());
    return std::make_pair(request->usage.cached_prompt_tokens, sink->text());
  };
  auto first = run("alpha");
  auto second = run("alpha");
  auto other = run("beta");
  EXPECT_EQ(first.first, 0);
  EXPECT_GE(second.first, 32);
  EXPECT_EQ(other.first, 0);
  EXPECT_EQ(first.second, second.second);
  EXPECT_EQ(first.second, other.second);
}

// Without max_tokens (OpenAI's and vLLM's reading), the answer may fill the context.
TEST(ModelStages, WithoutMaxTokensTheAnswerFillsTheContext) {
  auto pipeline = build_yaml(pipeline_yaml(model_path()), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", sink);
  request->generation.max_tokens = GenerationParams{}.max_tokens;  // not given
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(request->finish_reason(), FinishReason::length);
  EXPECT_EQ(request->usage.prompt_tokens + request->usage.completion_tokens, 256);
}

TEST(ModelStages, MaxTokensDefaultCapsAnAnswerWithoutMaxTokens) {
  auto pipeline =
      build_yaml(pipeline_yaml(model_path(), ", max_tokens_default: 20"), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", sink);
  request->generation.max_tokens = GenerationParams{}.max_tokens;  // not given
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(request->finish_reason(), FinishReason::length);
  EXPECT_EQ(request->usage.completion_tokens, 20);
}

// A gate that reserved less than the model's bound caps the answer (answer_token_cap): the
// engine ends it there with "length", with max_tokens or without.
TEST(ModelStages, AGatesCapEndsTheAnswerThere) {
  auto pipeline = build_yaml(pipeline_yaml(model_path()), builtin_registry());
  ASSERT_TRUE(pipeline);
  for (int64_t max_tokens : {int64_t{0}, int64_t{50}}) {
    std::shared_ptr<CollectingSink> sink;
    auto request = completion("the little robot", sink, max_tokens);
    request->generation.answer_token_cap = 20;
    ASSERT_EQ(pipeline->submit(request), Admission::accepted);
    ASSERT_TRUE(sink->wait());
    ASSERT_FALSE(request->error()) << request->error()->message;
    EXPECT_EQ(request->finish_reason(), FinishReason::length) << "max_tokens " << max_tokens;
    EXPECT_EQ(request->usage.completion_tokens, 20) << "max_tokens " << max_tokens;
  }
}

// Where a model computes is its backend's: the CPU's today, named with its device and memory.
TEST(ModelStages, TheModelReportsTheBackendItComputesOn) {
  auto pipeline = build_yaml(pipeline_yaml(model_path(), ", backend: cpu"), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto served = std::dynamic_pointer_cast<ServedModel>(pipeline->resource("llm"));
  ASSERT_TRUE(served);
  EngineStats stats = served->engine_stats();
  EXPECT_EQ(stats.backend, "cpu");
  EXPECT_FALSE(stats.device.empty());
  EXPECT_GT(stats.weight_bytes, 0);
  EXPECT_GT(stats.kv_pool_bytes, 0);
}

// Runs `prompt` through `pipeline` as a greedy 40-token completion and checks that the answer is
// the one the engine gives the model at `path` without the pipeline; the request.
std::shared_ptr<Request> greedy_answer_through(Pipeline& pipeline, const std::string& path,
                                               const std::string& prompt) {
  std::shared_ptr<CollectingSink> sink;
  auto request = completion(prompt, sink, 40);
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  if (request->error()) ADD_FAILURE() << request->error()->message;
  EXPECT_EQ(sink->text(), direct_text(path, prompt, 40));
  return request;
}

// speculative: {kind: ngram} reaches the engine: a greedy answer to a prompt that repeats itself
// is the one the engine gives without the pipeline, and the model counts the guesses it checked.
TEST(ModelStages, SpeculativeDecodingByPromptLookupKeepsTheGreedyAnswer) {
  std::string path = model_path();
  auto pipeline =
      build_yaml(pipeline_yaml(path, ", speculative: {kind: ngram, max_draft: 4, ngram_min: 1}"),
                 builtin_registry());
  ASSERT_TRUE(pipeline);
  greedy_answer_through(*pipeline, path, "one two three one two three one two three one two");
  auto served = std::dynamic_pointer_cast<ServedModel>(pipeline->resource("llm"));
  ASSERT_TRUE(served);
  EXPECT_GT(served->engine_stats().draft_tokens, 0);
}

// speculative: {kind: draft} reaches the engine: the model as its own draft keeps every guess, and
// the greedy answer is the one the engine gives without the pipeline.
TEST(ModelStages, SpeculativeDecodingByADraftModelKeepsTheGreedyAnswer) {
  std::string path = model_path();
  auto pipeline =
      build_yaml(pipeline_yaml(path, ", speculative: {kind: draft, draft_model: \"" + path + "\"}"),
                 builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = greedy_answer_through(*pipeline, path, "the little robot");
  auto served = std::dynamic_pointer_cast<ServedModel>(pipeline->resource("llm"));
  ASSERT_TRUE(served);
  EngineStats stats = served->engine_stats();
  EXPECT_GT(stats.draft_tokens, 20);
  EXPECT_EQ(stats.accepted_tokens, stats.draft_tokens);
  // The request's own count, for the access log's notes: kept/guessed.
  const std::string all = std::to_string(stats.draft_tokens);
  EXPECT_EQ(request->annotation("speculative"), all + "/" + all);
}

// A draft model that is missing, unreadable or of another vocabulary is refused at its key, with
// the file named; kind draft without one says what to add.
TEST(ModelStages, ADraftModelThatCannotDraftIsRefusedAtTheKey) {
  const std::string path = model_path();
  engine::ModelShape bert;
  bert.architecture = "bert";
  bert.kv_heads = bert.heads;
  engine::ModelShape worded;
  worded.vocabulary_from = testing::temp_model(bert);
  const std::string other = testing::temp_model(worded);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{kind: draft}", "key 'speculative': kind draft needs draft_model"},
      {"{kind: draft, draft_model: /nowhere/draft.gguf}",
       "key 'speculative.draft_model': /nowhere/draft.gguf: cannot open"},
      {"{kind: draft, draft_model: \"" + other + "\"}",
       "key 'speculative.draft_model': '" + other + "': the draft model has a vocabulary of"},
  };
  for (const auto& [speculative, expected] : cases) {
    const std::string yaml = "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + path +
                             "\",\n        speculative: " + speculative +
                             "}\nstages:\n"
                             "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                             "  - {name: echo, type: echo}\n";
    Diagnostics diagnostics;
    auto spec = check_yaml(yaml, builtin_registry(), diagnostics);
    ASSERT_TRUE(spec) << all_errors(diagnostics);
    EXPECT_FALSE(Pipeline::build(std::move(*spec), diagnostics));
    const std::string errors = all_errors(diagnostics);
    // At the draft_model key when there is one, else at the speculative key.
    EXPECT_EQ(errors.rfind("test.yaml:4:", 0), 0u) << errors;
    EXPECT_NE(errors.find("error: resource 'llm' (gguf_model): " + expected), std::string::npos)
        << errors;
  }
}

TEST(ModelStages, SpeculativeNgramBoundsThatCrossAreRefusedAtTheKey) {
  const std::string yaml =
      "version: 1\nresources:\n  llm: {type: gguf_model, path: nowhere.gguf,\n"
      "        speculative: {kind: ngram, ngram_min: 4, ngram_max: 2}}\nstages:\n"
      "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
      "  - {name: echo, type: echo}\n";
  Diagnostics diagnostics;
  auto spec = check_yaml(yaml, builtin_registry(), diagnostics);
  ASSERT_TRUE(spec) << all_errors(diagnostics);
  EXPECT_FALSE(Pipeline::build(std::move(*spec), diagnostics));
  const std::string errors = all_errors(diagnostics);
  EXPECT_EQ(errors.rfind("test.yaml:4:22: error: resource 'llm' (gguf_model): key 'speculative': "
                         "ngram_min (4) must not be larger than ngram_max (2)",
                         0),
            0u)
      << errors;
}

// backend: cuda in a build without the CUDA backend, or on a machine without a device, is refused
// at the key, saying how to get it, before any model is read (the path here does not exist).
TEST(ModelStages, ABackendThisBuildLacksIsRefusedAtItsKey) {
  const std::string yaml =
      "version: 1\nresources:\n  llm: {type: gguf_model, path: nowhere.gguf,\n"
      "        backend: cuda}\nstages:\n"
      "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
      "  - {name: echo, type: echo}\n";
  Diagnostics diagnostics;
  auto spec = check_yaml(yaml, builtin_registry(), diagnostics);
  ASSERT_TRUE(spec) << all_errors(diagnostics);
  auto pipeline = Pipeline::build(std::move(*spec), diagnostics);
  if (!engine::backend_unavailable("cuda")) GTEST_SKIP() << "a CUDA device is visible here";
  EXPECT_FALSE(pipeline);
  const std::string errors = all_errors(diagnostics);
  EXPECT_EQ(errors.rfind("test.yaml:4:18: error: resource 'llm' (gguf_model): key 'backend': ", 0),
            0u)
      << errors;
  EXPECT_NE(errors.find(engine::built_with_cuda()
                            ? "no CUDA device is visible here"
                            : "built without CUDA: rebuild with -DCHATFLOW_CUDA=ON"),
            std::string::npos)
      << errors;
  EXPECT_EQ(errors.find("nowhere.gguf"), std::string::npos) << errors;
}

TEST(ModelStages, StoriesModelThroughTheMinimalPipeline) {
  CHATFLOW_REQUIRE_SHARED(path, "models/stories260K/stories260K.gguf");
  auto pipeline = build_yaml(pipeline_yaml(path), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto sink = std::make_shared<CollectingSink>();
  auto request = std::make_shared<Request>();
  request->messages.push_back({"user", "Once upon a time"});
  request->generation.temperature = 0;
  request->generation.max_tokens = 16;
  request->sink = sink;
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(sink->text(), ", there was a little girl named Lily. She loved to play");
}

}  // namespace
}  // namespace chatflow::testing
