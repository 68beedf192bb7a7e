// Loading models: what is wrong with a file is named (architecture, tensor, shape, key), and a
// prompt that cannot fit is refused before any work.
#include <cstring>
#include <functional>

#include <gtest/gtest.h>

#include "framework/engine/cpu/cpu_weights.h"
#include "framework/engine/generator.h"
#include "framework/engine/gguf_writer.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

ModelShape small_shape() {
  ModelShape shape;
  shape.layers = 1;
  shape.context = 64;
  return shape;
}

// Rewrites the small test model through `edit`, which may drop or change entries.
std::string rewritten(const std::string& name,
                      const std::function<void(GgufWriter&, const GgufFile&)>& edit,
                      const std::string& drop_tensor = "", const std::string& drop_key = "") {
  return testing::rewritten_model(testing::temp_model(small_shape()), name + ".gguf", edit,
                                  drop_tensor, drop_key);
}

std::string load_error(const std::string& path) {
  try {
    Model::load(path);
  } catch (const GgufError& error) {
    return error.what();
  }
  return "";
}

TEST(ModelLoading, UnknownArchitectureIsRefusedByName) {
  std::string path = rewritten("arch", [](GgufWriter& writer, const GgufFile&) {
    writer.set_string("general.architecture", "gptj");
  });
  EXPECT_NE(load_error(path).find(
                "architecture 'gptj' is not supported (supported: llama, qwen2, qwen2moe, "
                "qwen3, qwen3moe, gemma2, gemma3, phi3)"),
            std::string::npos)
      << load_error(path);
}

TEST(ModelLoading, UnknownRopeScalingIsRefusedByName) {
  std::string path = rewritten("rope", [](GgufWriter& writer, const GgufFile&) {
    writer.set_string("llama.rope.scaling.type", "su");
    writer.set_float32("llama.rope.scaling.factor", 4.0f);
  });
  EXPECT_NE(
      load_error(path).find("rope scaling 'su' is not supported (supported: none, linear, yarn)"),
      std::string::npos)
      << load_error(path);
}

TEST(ModelLoading, RopeFactorsThatAreNotF32PerPairAreRefused) {
  std::string path = rewritten("rope_freqs", [](GgufWriter& writer, const GgufFile&) {
    writer.add_tensor("rope_freqs.weight", {3}, kernels::TensorType::f32, std::vector<uint8_t>(12));
  });
  EXPECT_NE(load_error(path).find("tensor 'rope_freqs.weight' must be f32 of at least 8 values"),
            std::string::npos)
      << load_error(path);
}

TEST(ModelLoading, ATensorTheArchitectureDoesNotReadIsRefusedNotIgnored) {
  std::string path = rewritten("extra", [](GgufWriter& writer, const GgufFile&) {
    writer.add_tensor("blk.0.ffn_gate_inp.weight", {64, 4}, kernels::TensorType::f32,
                      std::vector<uint8_t>(64 * 4 * 4));
  });
  EXPECT_NE(load_error(path).find("tensor 'blk.0.ffn_gate_inp.weight' is not part of the llama "
                                  "architecture as chatflow computes it"),
            std::string::npos)
      << load_error(path);
}

TEST(ModelLoading, MissingTensorIsNamed) {
  std::string path = rewritten(
      "missing", [](GgufWriter&, const GgufFile&) {}, "blk.0.ffn_up.weight");
  EXPECT_NE(load_error(path).find("tensor 'blk.0.ffn_up.weight' is missing"), std::string::npos)
      << load_error(path);
}

TEST(ModelLoading, TensorOfTheWrongShapeIsNamedWithTheExpectedShape) {
  std::string path = rewritten(
      "shape",
      [](GgufWriter& writer, const GgufFile&) {
        writer.add_tensor("blk.0.attn_k.weight", {64, 64}, kernels::TensorType::f32,
                          std::vector<uint8_t>(64 * 64 * 4));
      },
      "blk.0.attn_k.weight");
  std::string error = load_error(path);
  EXPECT_NE(error.find("tensor 'blk.0.attn_k.weight' has shape [64, 64], expected [64, 32]"),
            std::string::npos)
      << error;
}

TEST(ModelLoading, VocabularyWithoutTokensIsRefused) {
  std::string path = rewritten(
      "notokens", [](GgufWriter&, const GgufFile&) {}, "", "tokenizer.ggml.tokens");
  EXPECT_NE(load_error(path).find("tokenizer.ggml.tokens (an array of strings) is missing"),
            std::string::npos);
}

TEST(ModelLoading, MissingRequiredHyperparameterIsNamed) {
  std::string path = rewritten(
      "nolayers", [](GgufWriter&, const GgufFile&) {}, "", "llama.block_count");
  EXPECT_NE(load_error(path).find("required metadata 'llama.block_count' is missing"),
            std::string::npos);
}

TEST(ModelLoading, QuantisedWeightsStayQuantisedInMemory) {
  ModelShape shape = small_shape();
  shape.type = kernels::TensorType::q4_0;
  auto model = Model::load(testing::temp_model(shape));
  EXPECT_EQ(model->layers()[0].query.type, kernels::TensorType::q4_0);
  // The model's view is of the file; the CPU backend places the matrices, the file's bytes
  // unchanged (not converted), in its own memory.
  const GgufTensorInfo* tensor = model->file().find_tensor("blk.0.attn_q.weight");
  EXPECT_EQ(model->layers()[0].query.data, tensor->data);
  CpuWeights weights(*model);
  const WeightMatrix& query = weights.layers()[0].query;
  EXPECT_EQ(query.type, kernels::TensorType::q4_0);
  ASSERT_EQ(query.row_bytes * static_cast<size_t>(query.rows), tensor->bytes);
  EXPECT_NE(query.data, tensor->data);
  EXPECT_EQ(std::memcmp(query.data, tensor->data, tensor->bytes), 0);
}

TEST(Generation, PromptLongerThanTheContextIsRefused) {
  auto model = Model::load(testing::temp_model(small_shape()));
  Generator generator(model, 1);
  GenerationRequest request;
  request.prompt.assign(64, 5);
  try {
    generator.generate(request);
    FAIL() << "expected an error";
  } catch (const std::length_error& error) {
    EXPECT_NE(
        std::string(error.what()).find("the prompt has 64 tokens; the model's context holds 64"),
        std::string::npos);
  }
}

TEST(Generation, StopsAtMaxTokensAndReportsWhy) {
  auto model = Model::load(testing::temp_model(small_shape()));
  Generator generator(model, 1);
  GenerationRequest request;
  request.prompt = model->tokenizer().encode("hello", true);
  request.sampling.temperature = 0;
  request.max_tokens = 5;
  request.ignore_eos = true;
  int calls = 0;
  auto result = generator.generate(request, [&](const GeneratedToken&) { return ++calls < 100; });
  EXPECT_EQ(result.tokens.size(), 5u);
  EXPECT_EQ(result.reason, StopReason::length);
  auto stopped = generator.generate(request, [&](const GeneratedToken&) { return false; });
  EXPECT_EQ(stopped.tokens.size(), 1u);
  EXPECT_EQ(stopped.reason, StopReason::stopped_by_caller);
}

}  // namespace
}  // namespace chatflow::engine
