// The decode stage: the generation prefill started becomes the response stream, one chunk per
// generated token in the engine's order, the last one carrying why it ended and the usage. No
// detokenize runs after it here, so the sink sees decode's own chunks (token ids, no text). Over
// a random-weight model written by the test support, checked against the engine used directly.
#include <thread>

#include <gtest/gtest.h>

#include "framework/engine/generator.h"
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

std::string pipeline_yaml(const std::string& model_settings = "") {
  return "version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() + "\"" +
         model_settings +
         "}\nstages:\n"
         "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
         "  - {name: prefill, type: prefill, config: {model: llm}}\n"
         "  - {name: decode, type: decode, config: {model: llm}}\n";
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

// The tokens the engine generates for `prompt` when used directly, without any pipeline.
std::vector<int32_t> direct_tokens(const std::string& prompt, int64_t max_tokens) {
  auto model = engine::Model::load(model_path());
  engine::Generator generator(model, 1);
  engine::GenerationRequest request;
  request.prompt = model->tokenizer().encode(prompt, true);
  request.sampling.temperature = 0;
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  auto tokens = generator.generate(request).tokens;
  return std::vector<int32_t>(tokens.begin(), tokens.end());
}

TEST(Decode, EachGeneratedTokenIsAChunkOfItsOwnInTheEnginesOrder) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", 8, sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(request->error()) << request->error()->message;
  std::vector<Chunk> chunks = sink->chunks();
  ASSERT_FALSE(chunks.empty());
  std::vector<int32_t> streamed;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].token_ids.size(), 1u) << "chunk " << i;
    EXPECT_FALSE(chunks[i].is_final()) << "chunk " << i;
    streamed.insert(streamed.end(), chunks[i].token_ids.begin(), chunks[i].token_ids.end());
  }
  EXPECT_EQ(streamed, direct_tokens("the little robot", 8));
}

TEST(Decode, TheLastChunkCarriesTheFinishReasonAndTheUsage) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", 5, sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(request->error()) << request->error()->message;
  Chunk last = sink->chunks().back();
  ASSERT_TRUE(last.is_final());
  EXPECT_EQ(*last.finish, FinishReason::length);
  EXPECT_TRUE(last.token_ids.empty());
  ASSERT_TRUE(last.usage);
  EXPECT_EQ(last.usage->completion_tokens, 5);
  EXPECT_EQ(last.usage->prompt_tokens, static_cast<int64_t>(request->prompt_tokens.size()));
  EXPECT_EQ(request->finish_reason(), FinishReason::length);
}

// The model ending its answer (here a response format it has completed, after which only the
// end of generation is allowed) is finish reason "stop", well before max_tokens.
TEST(Decode, TheModelsEndOfGenerationIsFinishReasonStop) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", 60, sink);
  request->generation.ignore_eos = false;
  request->generation.response_format.kind = ResponseFormat::Kind::json_schema;
  request->generation.response_format.name = "answer";
  request->generation.response_format.schema =
      R"({"type": "object", "properties": {"ok": {"enum": [true]}}, "required": ["ok"],)"
      R"( "additionalProperties": false})";
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(request->error()) << request->error()->message;
  EXPECT_EQ(request->finish_reason(), FinishReason::stop);
  EXPECT_LT(request->usage.completion_tokens, 60);
}

TEST(Decode, LogprobsComeWithTheirTokenWhenAsked) {
  auto pipeline = build_yaml(pipeline_yaml(), builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", 4, sink);
  request->generation.logprobs = true;
  request->generation.top_logprobs = 2;
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_FALSE(request->error()) << request->error()->message;
  int with_tokens = 0;
  for (const auto& chunk : sink->chunks()) {
    if (chunk.token_ids.empty()) continue;
    ++with_tokens;
    ASSERT_EQ(chunk.logprobs.size(), 1u);
    EXPECT_EQ(chunk.logprobs[0].token, chunk.token_ids[0]);
    EXPECT_LE(chunk.logprobs[0].logprob, 0.0f);
    EXPECT_EQ(chunk.logprobs[0].top.size(), 2u);
  }
  EXPECT_EQ(with_tokens, 4);
}

// A stream stage that cancels the request when the `at`-th chunk reaches it (as a client that
// goes away mid-answer does), so the cancel falls mid-stream however fast the model is.
struct CancelAtConfig {
  int64_t at = 2;
};

class CancelAtStage final : public StreamStage {
  struct Seen : StreamState {
    int64_t chunks = 0;
  };

 public:
  explicit CancelAtStage(CancelAtConfig config) : config_(config) {}
  void process(StreamContext& context, Chunk chunk) override {
    if (++context.state<Seen>().chunks == config_.at) {
      context.request().cancel();
      return;
    }
    context.emit(std::move(chunk));
  }

 private:
  CancelAtConfig config_;
};

Registry registry_with_cancel_at() {
  Registry registry = builtin_registry();
  StageTypeBuilder<CancelAtConfig> type("cancel_at", StageKind::stream,
                                        "cancels the request at its at-th chunk");
  type.port("out", PortKind::stream, "the chunks before it");
  type.config().key("at", &CancelAtConfig::at, "the chunk that cancels");
  type.create([](const CancelAtConfig& config, StageContext&) {
    return std::make_unique<CancelAtStage>(config);
  });
  registry.add(type.build());
  return registry;
}

// A request cancelled mid-stream ends with 499, and the engine lets go of its sequence and
// every KV block it held.
TEST(Decode, ACancelledRequestEndsAndTheEngineFreesItsBlocks) {
  auto pipeline = build_yaml(pipeline_yaml(", kv_cache: {prefix_cache: false}") +
                                 "  - {name: cancel, type: cancel_at, config: {at: 2}}\n",
                             registry_with_cancel_at());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("a long story begins", 200, sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 499);
  auto model = std::static_pointer_cast<GgufModel>(pipeline->resource("llm"));
  for (int i = 0; i < 2000 && model->stats().running > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto stats = model->stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.free_blocks, stats.total_blocks) << "every block is back in the pool";
}

TEST(Decode, WithoutPrefillBeforeItTheRequestIsA500NamingTheMissingStage) {
  auto pipeline =
      build_yaml("version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() +
                     "\"}\nstages:\n"
                     "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                     "  - {name: decode, type: decode, config: {model: llm}}\n",
                 builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = completion("the little robot", 4, sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 500);
  EXPECT_NE(request->error()->message.find("needs a prefill stage before it"), std::string::npos)
      << request->error()->message;
}

TEST(Decode, ModelIsARequiredKey) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nresources:\n  llm: {type: gguf_model, path: model.gguf}\nstages:\n"
      "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
      "  - {name: prefill, type: prefill, config: {model: llm}}\n"
      "  - {name: decode, type: decode}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:7:5: error: stage 'decode' (decode): missing required key "
                        "'model'"),
            std::string::npos)
      << errors;
}

}  // namespace
}  // namespace chatflow::testing
