// The model stages as a pipeline runs them: tokenize -> prefill -> decode -> detokenize ->
// sse_emit over a real (random-weight) model, checked against the engine used directly.
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/engine/generator.h"
#include "stages/gguf_model.h"
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

TEST(ModelStages, StopStringEndsTheStreamAndTheEngineLetsGo) {
  std::string path = model_path();
  std::string full = direct_text(path, "the little robot", 30);
  // A random-weight model writes mostly stray bytes: stop on two plain letters it did write.
  size_t at = 4;
  auto plain = [&](size_t i) { return full[i] >= 'A' && full[i] <= 'z'; };
  while (at + 1 < full.size() && !(plain(at) && plain(at + 1)))
    ++at;
  ASSERT_LT(at + 1, full.size()) << "no two plain letters in " << full;
  std::string stop = full.substr(at, 2);
  auto pipeline = build_yaml(pipeline_yaml(path), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", sink, 30);
  request->generation.stop = {stop};
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(sink->text(), full.substr(0, full.find(stop)));
  EXPECT_EQ(request->finish_reason(), FinishReason::stop);
  EXPECT_LT(request->usage.completion_tokens, 30);
  auto model = std::static_pointer_cast<GgufModel>(pipeline->resource("llm"));
  for (int i = 0; i < 2000 && model->stats().running > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(model->stats().running, 0) << "the engine dropped the stopped sequence";
  EXPECT_EQ(model->stats().sequence_blocks, 0);
}

TEST(ModelStages, CancelledRequestFreesItsBlocks) {
  std::string path = model_path();
  auto pipeline =
      build_yaml(pipeline_yaml(path, ", kv_cache: {prefix_cache: false}"), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("a long story begins", sink, 200);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  for (int i = 0; i < 5000 && sink->chunks().size() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  request->cancel();
  ASSERT_TRUE(sink->wait());
  auto model = std::static_pointer_cast<GgufModel>(pipeline->resource("llm"));
  for (int i = 0; i < 2000 && model->stats().running > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto stats = model->stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.free_blocks, stats.total_blocks) << "every block is back in the pool";
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

TEST(ModelStages, PromptThatCannotFitIsA400) {
  std::string path = model_path();
  auto pipeline = build_yaml(pipeline_yaml(path), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("hello", sink, 1000);  // the model's context is 256
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 400);
  EXPECT_EQ(request->error()->code, "context_length_exceeded");
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

TEST(ModelStages, SseEventsHaveTheOpenAiShape) {
  std::string path = model_path();
  auto pipeline = build_yaml(pipeline_yaml(path), builtin_registry());
  ASSERT_TRUE(pipeline);
  auto sink = std::make_shared<CollectingSink>();
  auto request = std::make_shared<Request>();
  request->id = "chatcmpl-1";
  request->model = "tiny";
  request->created = 1700000000;
  request->include_usage = true;
  request->messages.push_back({"user", "say something"});
  request->generation.temperature = 0;
  request->generation.max_tokens = 6;
  request->generation.ignore_eos = true;
  request->sink = sink;
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  std::string wire;
  for (const auto& chunk : sink->chunks())
    wire += chunk.encoded;
  std::vector<std::string> events;
  for (size_t start = 0; start < wire.size();) {
    size_t end = wire.find("\n\n", start);
    ASSERT_NE(end, std::string::npos);
    ASSERT_EQ(wire.compare(start, 6, "data: "), 0);
    events.push_back(wire.substr(start + 6, end - start - 6));
    start = end + 2;
  }
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  auto first = boost::json::parse(events[0]).as_object();
  EXPECT_EQ(first.at("object"), "chat.completion.chunk");
  EXPECT_EQ(first.at("id"), "chatcmpl-1");
  EXPECT_EQ(first.at("created"), 1700000000);
  EXPECT_TRUE(first.at("usage").is_null());
  EXPECT_EQ(first.at("choices").as_array()[0].as_object().at("delta").as_object().at("role"),
            "assistant");
  std::string content;
  for (size_t i = 1; i + 3 < events.size(); ++i) {
    auto choice = boost::json::parse(events[i]).as_object().at("choices").as_array()[0].as_object();
    EXPECT_TRUE(choice.at("finish_reason").is_null());
    content += boost::json::value_to<std::string>(choice.at("delta").as_object().at("content"));
  }
  EXPECT_EQ(content, sink->text());
  auto last_choice = boost::json::parse(events[events.size() - 3])
                         .as_object()
                         .at("choices")
                         .as_array()[0]
                         .as_object();
  EXPECT_EQ(last_choice.at("finish_reason"), "length");
  EXPECT_TRUE(last_choice.at("delta").as_object().empty());
  auto usage_chunk = boost::json::parse(events[events.size() - 2]).as_object();
  EXPECT_TRUE(usage_chunk.at("choices").as_array().empty());
  EXPECT_EQ(usage_chunk.at("usage").as_object().at("completion_tokens"), 6);
  EXPECT_EQ(usage_chunk.at("usage").as_object().at("prompt_tokens"),
            static_cast<int64_t>(request->prompt_tokens.size()));
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
