// Every model family against the double-precision reference written from its published
// definition: make-model files (f32 weights, f32 KV cache) for each architecture and rope form,
// prompts long enough that sliding windows slide, logits compared after a prefill and after
// each decoded token.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include <gtest/gtest.h>

#include "architecture_reference.h"
#include "framework/engine/backend.h"
#include "framework/engine/gguf_writer.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

struct Family {
  const char* name;
  const char* architecture;
  const char* rope_scaling;
  int64_t layers;
  int64_t sliding_window;
  float weight_scale;
  int64_t experts = 0;
  int64_t experts_used = 0;
};

std::ostream& operator<<(std::ostream& out, const Family& family) {
  return out << family.name;
}

// The CPU backend with an f32 KV pool of `blocks` blocks, and its block allocator.
struct Engine {
  Engine(std::shared_ptr<const Model> model, int threads, int64_t blocks)
      : backend(make_backend("cpu", model, {threads})), cache(16, blocks) {
    backend->allocate_kv_pool({blocks, 16, kernels::KvType::f32});
  }
  // One step in which each of `sequences` gets `prompts` at its end and wants its last logits
  // row; returns the rows in order.
  std::vector<float> run(std::span<KvSequence> sequences,
                         const std::vector<std::span<const TokenId>>& prompts) {
    std::vector<StepChunk> chunks;
    for (size_t i = 0; i < prompts.size(); ++i) {
      KvSequence& sequence = sequences[i];
      reserve(cache, sequence, sequence.length + static_cast<int64_t>(prompts[i].size()));
      StepChunk chunk;
      chunk.tokens = prompts[i];
      chunk.start = sequence.length;
      chunk.block_table = sequence.blocks;
      chunk.want = StepChunk::Want::logits;
      chunks.push_back(chunk);
    }
    StepOutput output;
    backend->forward(chunks, output);
    for (size_t i = 0; i < prompts.size(); ++i)
      sequences[i].length += static_cast<int64_t>(prompts[i].size());
    return output.logits;
  }
  std::unique_ptr<Backend> backend;
  KvBlockAllocator cache;
};

ModelShape shape_of(const Family& family) {
  ModelShape shape;
  shape.architecture = family.architecture;
  shape.rope_scaling = family.rope_scaling;
  shape.sliding_window = family.sliding_window;
  shape.weight_scale = family.weight_scale;
  shape.experts = family.experts;
  shape.experts_used = family.experts_used;
  shape.dim = 64;
  shape.layers = family.layers;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.ffn = 96;
  shape.context = 256;
  shape.type = kernels::TensorType::f32;
  shape.rope_base = 10000.0f;
  return shape;
}

class Architectures : public ::testing::TestWithParam<Family> {};

TEST_P(Architectures, LogitsMatchTheReferenceWithin1e4) {
  const Family& family = GetParam();
  const std::string path = testing::temp_model(shape_of(family));
  auto model = Model::load(path);
  Engine engine(model, 2, 16);
  testing::ArchitectureReference reference(path);

  const int64_t vocabulary = model->config().vocabulary;
  std::vector<TokenId> prompt;
  for (int i = 0; i < 30; ++i)
    prompt.push_back(static_cast<TokenId>((i * 37 + 5) % vocabulary));
  std::vector<double> expected;
  for (TokenId token : prompt)
    expected = reference.step(token);

  KvSequence sequence;
  auto run = [&](std::span<const TokenId> tokens) { return engine.run({&sequence, 1}, {tokens}); };
  auto compare = [&](const std::vector<float>& actual, const std::string& when) {
    double largest = 1;
    for (double value : expected)
      largest = std::max(largest, std::fabs(value));
    double worst = 0;
    for (size_t i = 0; i < actual.size(); ++i)
      worst = std::max(worst, std::fabs(actual[i] - expected[i]));
    EXPECT_LE(worst / largest, 1e-4) << family.name << " " << when << ": largest difference "
                                     << worst << " against logits up to " << largest;
  };
  compare(run(prompt), "after the prompt");
  TokenId next = 11;
  for (int i = 0; i < 12; ++i) {
    expected = reference.step(next);
    compare(run({&next, 1}), "at decode step " + std::to_string(i));
    next = static_cast<TokenId>((next * 7 + 3) % vocabulary);
  }
}

// Windows of 12 positions against prompts of 30 and more: the window moves in every test.
INSTANTIATE_TEST_SUITE_P(
    Families, Architectures,
    ::testing::Values(Family{"llama", "llama", "none", 2, 0, 0.08f},
                      Family{"llama_llama3_rope", "llama", "llama3", 2, 0, 0.08f},
                      Family{"llama_linear_rope", "llama", "linear", 2, 0, 0.08f},
                      Family{"llama_yarn", "llama", "yarn", 2, 0, 0.08f},
                      Family{"mistral_sliding_window", "llama", "none", 2, 12, 0.08f},
                      Family{"qwen2", "qwen2", "none", 2, 0, 0.08f},
                      Family{"qwen2_yarn", "qwen2", "yarn", 2, 0, 0.08f},
                      Family{"qwen3", "qwen3", "none", 2, 0, 0.08f},
                      Family{"gemma2", "gemma2", "none", 3, 12, 0.04f},
                      Family{"gemma3", "gemma3", "linear", 7, 12, 0.04f},
                      Family{"phi3", "phi3", "none", 2, 12, 0.08f},
                      Family{"phi3_longrope", "phi3", "longrope", 2, 12, 0.08f},
                      Family{"mixtral", "llama", "none", 2, 0, 0.08f, 4, 2},
                      Family{"qwen2moe", "qwen2moe", "none", 2, 0, 0.08f, 4, 2},
                      Family{"qwen3moe", "qwen3moe", "none", 2, 0, 0.08f, 8, 3}),
    [](const ::testing::TestParamInfo<Family>& info) { return std::string(info.param.name); });

// A token's experts and their sum do not depend on which other tokens share the step: three
// sequences decoded together give each exactly the logits it gets alone.
TEST(Architectures, MixtureOfExpertsIsIndependentOfTheBatch) {
  const std::string path =
      testing::temp_model(shape_of(Family{"mixtral", "llama", "none", 2, 0, 0.08f, 4, 2}));
  auto model = Model::load(path);
  const int64_t vocabulary = model->config().vocabulary;
  auto run = [&](const std::vector<std::vector<TokenId>>& prompts) {
    Engine engine(model, 2, 32);
    std::vector<KvSequence> sequences(prompts.size());
    return engine.run(sequences, {prompts.begin(), prompts.end()});
  };
  const std::vector<std::vector<TokenId>> prompts = {{5, 9, 77, 3}, {100, 2}, {42, 43, 44, 45, 46}};
  std::vector<float> together = run(prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<float> alone = run({prompts[i]});
    for (int64_t v = 0; v < vocabulary; ++v)
      ASSERT_EQ(alone[static_cast<size_t>(v)],
                together[i * static_cast<size_t>(vocabulary) + static_cast<size_t>(v)])
          << "sequence " << i << " logit " << v;
  }
}

// Some llama files carry q, k, v and output biases (llama.cpp applies them when present).
TEST(Architectures, LlamaBiasesArePartOfTheForwardPass) {
  const std::string plain =
      testing::temp_model(shape_of(Family{"llama", "llama", "none", 2, 0, 0.08f}));
  auto bias = [](GgufWriter& writer, const std::string& name, int64_t length, float scale) {
    std::vector<float> values(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; ++i)
      values[static_cast<size_t>(i)] = scale * std::sin(0.7f * static_cast<float>(i) + 1);
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    writer.add_tensor(name, {length}, kernels::TensorType::f32, std::move(bytes));
  };
  const std::string path = testing::rewritten_model(
      plain, "llama-biases.gguf", [&](GgufWriter& writer, const GgufFile&) {
        for (int layer = 0; layer < 2; ++layer) {
          std::string prefix = "blk." + std::to_string(layer) + ".";
          bias(writer, prefix + "attn_q.bias", 64, 0.3f);
          bias(writer, prefix + "attn_k.bias", 32, 0.3f);
          bias(writer, prefix + "attn_v.bias", 32, 0.3f);
          bias(writer, prefix + "attn_output.bias", 64, 0.3f);
        }
      });

  auto model = Model::load(path);
  Engine engine(model, 1, 4);
  testing::ArchitectureReference reference(path);
  const std::vector<TokenId> prompt = {3, 17, 29, 41};
  std::vector<double> expected;
  for (TokenId token : prompt)
    expected = reference.step(token);
  KvSequence sequence;
  std::vector<float> logits = engine.run({&sequence, 1}, {prompt});
  double worst = 0, largest = 1;
  for (size_t i = 0; i < logits.size(); ++i) {
    worst = std::max(worst, std::fabs(logits[i] - expected[i]));
    largest = std::max(largest, std::fabs(expected[i]));
  }
  EXPECT_LE(worst / largest, 1e-4);
  // And the biases matter: without them the logits differ.
  testing::ArchitectureReference unbiased(plain);
  std::vector<double> without;
  for (TokenId token : prompt)
    without = unbiased.step(token);
  double moved = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    moved = std::max(moved, std::fabs(without[i] - expected[i]));
  EXPECT_GT(moved / largest, 1e-2);
}

// As llama.cpp reads phi3 files: the window key must be there, and 0 (Phi-4's files) means none.
TEST(Architectures, Phi3NeedsItsWindowKeyAndZeroMeansNoWindow) {
  const std::string source_path =
      testing::temp_model(shape_of(Family{"phi3", "phi3", "none", 2, 12, 0.08f}));
  auto rewrite = [&](const std::string& name, std::optional<uint32_t> window) {
    return testing::rewritten_model(
        source_path, name,
        [&](GgufWriter& writer, const GgufFile&) {
          if (window) writer.set_uint32("phi3.attention.sliding_window", *window);
        },
        "", "phi3.attention.sliding_window");
  };
  EXPECT_EQ(Model::load(rewrite("phi3-window0.gguf", 0u))->config().sliding_window, 0);
  EXPECT_FALSE(Model::load(rewrite("phi3-window0.gguf", 0u))->config().sliding_layer(0));
  try {
    Model::load(rewrite("phi3-nowindow.gguf", std::nullopt));
    ADD_FAILURE() << "a phi3 file without its window key loaded";
  } catch (const GgufError& error) {
    EXPECT_NE(std::string(error.what()).find("phi3 needs phi3.attention.sliding_window"),
              std::string::npos)
        << error.what();
  }
}

TEST(Architectures, UnknownArchitectureIsRefusedByName) {
  ModelShape shape = shape_of(Family{"x", "llama", "none", 1, 0, 0.08f});
  shape.architecture = "mamba";
  EXPECT_THROW(
      {
        try {
          write_random_model(shape, testing::temp_path("mamba.gguf"));
        } catch (const std::invalid_argument& error) {
          EXPECT_NE(std::string(error.what()).find("'mamba'"), std::string::npos) << error.what();
          throw;
        }
      },
      std::invalid_argument);
}

}  // namespace
}  // namespace chatflow::engine
