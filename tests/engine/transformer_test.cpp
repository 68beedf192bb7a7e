// The CPU backend's forward pass (framework/engine/cpu/transformer.h) against the plain
// reference implementation, for every tensor type and both architectures; and batching: prefill
// in one piece, in pieces, or token by token, and sequences sharing a step, all give
// bit-identical logits.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "framework/engine/backend.h"
#include "reference_transformer.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

ModelShape shape_for(kernels::TensorType type, const std::string& architecture = "llama") {
  ModelShape shape;
  shape.architecture = architecture;
  shape.dim = 64;
  shape.layers = 2;
  shape.heads = 4;
  shape.kv_heads = 2;  // grouped-query attention
  shape.ffn = 96;
  shape.context = 256;
  shape.type = type;
  if (kernels::block_values(type) == kernels::kSuperBlock) {  // rows of whole super-blocks
    shape.dim = 256;
    shape.ffn = 512;
  }
  return shape;
}

float largest_magnitude(const std::vector<float>& values) {
  float largest = 0;
  for (float value : values)
    largest = std::max(largest, std::fabs(value));
  return largest;
}

void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                  const std::string& what, float relative = 2e-3f) {
  ASSERT_EQ(actual.size(), expected.size());
  float tolerance = relative * std::max(1.0f, largest_magnitude(expected));
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance) << what << ", logit " << i;
  }
}

// A chunk of `tokens` at the end of `sequence` that wants its last logits row.
StepChunk logits_chunk(const KvSequence& sequence, std::span<const TokenId> tokens) {
  StepChunk chunk;
  chunk.tokens = tokens;
  chunk.start = sequence.length;
  chunk.block_table = sequence.blocks;
  chunk.want = StepChunk::Want::logits;
  return chunk;
}

struct Engine {
  explicit Engine(const std::string& path, kernels::KvType kv_type = kernels::KvType::f16)
      : model(Model::load(path)), backend(make_backend("cpu", model, {2})), cache(16, 64) {
    backend->allocate_kv_pool({cache.total_blocks(), cache.block_tokens(), kv_type});
  }
  std::vector<float> run(KvSequence& sequence, std::span<const TokenId> tokens) {
    reserve(cache, sequence, sequence.length + static_cast<int64_t>(tokens.size()));
    StepChunk chunk = logits_chunk(sequence, tokens);
    StepOutput output;
    backend->forward({&chunk, 1}, output);
    sequence.length += static_cast<int64_t>(tokens.size());
    return output.logits;
  }
  std::shared_ptr<const Model> model;
  std::unique_ptr<Backend> backend;
  KvBlockAllocator cache;
};

class TransformerAgainstReference
    : public ::testing::TestWithParam<std::tuple<kernels::TensorType, const char*>> {};

TEST_P(TransformerAgainstReference, LogitsMatchForPrefillAndDecode) {
  auto [type, architecture] = GetParam();
  // Quantised weights take 8-bit activations; with the f16 cache's rounding in the engine but
  // not in the reference, some activations would round to the neighbouring level and the two
  // drift apart by more than arithmetic differences. The f32 cache keeps them in step.
  Engine engine(testing::temp_model(shape_for(type, architecture)),
                kernels::is_quantized(type) ? kernels::KvType::f32 : kernels::KvType::f16);
  testing::ReferenceTransformer reference(*engine.model);
  std::vector<TokenId> prompt =
      engine.model->tokenizer().encode("the cat sat on the mat, and it was happy", true);
  ASSERT_GT(prompt.size(), 20u) << "a prompt long enough to span two KV blocks";
  KvSequence sequence;
  std::vector<float> logits = engine.run(sequence, prompt);
  std::vector<float> expected;
  for (TokenId token : prompt)
    expected = reference.step(token);
  // Quantised weights take 8-bit activations. Engine and reference agree to ~1e-7 until a
  // last-bit difference makes one value round to the neighbouring level; one such flip moves
  // logits of this small model by about 1% of their scale. The kernels themselves are exact
  // (quantized_kernels_test), and a wrong format here would be off by far more.
  const float relative = kernels::is_quantized(type) ? 2.5e-2f : 2e-3f;
  expect_close(logits, expected, "after the prompt", relative);
  for (int step = 0; step < 6; ++step) {
    TokenId next =
        static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    logits = engine.run(sequence, {&next, 1});
    expect_close(logits, reference.step(next), "decode step " + std::to_string(step), relative);
  }
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndArchitectures, TransformerAgainstReference,
    ::testing::Combine(::testing::Values(kernels::TensorType::f32, kernels::TensorType::f16,
                                         kernels::TensorType::bf16, kernels::TensorType::q8_0,
                                         kernels::TensorType::q4_0, kernels::TensorType::q5_1,
                                         kernels::TensorType::iq4_nl, kernels::TensorType::q2_k,
                                         kernels::TensorType::q3_k, kernels::TensorType::q4_k,
                                         kernels::TensorType::q5_k, kernels::TensorType::q6_k,
                                         kernels::TensorType::iq4_xs),
                       ::testing::Values("llama", "qwen2")),
    [](const auto& info) {
      return std::string(kernels::to_string(std::get<0>(info.param))) + "_" +
             std::get<1>(info.param);
    });

// An f32 cache keeps keys and values exactly as computed, so the logits follow the reference far
// more closely than the f16 cache's; and the f16 cache really rounds (its logits differ).
TEST(TransformerKvCache, F32CacheFollowsTheReferenceMoreCloselyThanF16) {
  std::string path = testing::temp_model(shape_for(kernels::TensorType::f32));
  Engine exact(path, kernels::KvType::f32);
  Engine halves(path, kernels::KvType::f16);
  testing::ReferenceTransformer reference(*exact.model);
  std::vector<TokenId> prompt =
      exact.model->tokenizer().encode("the cat sat on the mat, and it was happy", true);
  KvSequence exact_sequence, half_sequence;
  std::vector<float> exact_logits = exact.run(exact_sequence, prompt);
  std::vector<float> half_logits = halves.run(half_sequence, prompt);
  std::vector<float> expected;
  for (TokenId token : prompt)
    expected = reference.step(token);
  float largest_exact_error = 0, largest_half_error = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    largest_exact_error = std::max(largest_exact_error, std::fabs(exact_logits[i] - expected[i]));
    largest_half_error = std::max(largest_half_error, std::fabs(half_logits[i] - expected[i]));
  }
  float scale = std::max(1.0f, largest_magnitude(expected));
  EXPECT_LT(largest_exact_error, 1e-4f * scale);
  EXPECT_LT(largest_half_error, 2e-3f * scale);
  EXPECT_GT(largest_half_error, largest_exact_error);
}

TEST(TransformerBatching, PrefillInOnePieceInPiecesOrTokenByTokenIsIdentical) {
  Engine engine(testing::temp_model(shape_for(kernels::TensorType::f16)));
  std::vector<TokenId> prompt =
      engine.model->tokenizer().encode("one two three four five six seven eight nine", true);
  KvSequence whole, pieces, single;
  std::vector<float> whole_logits = engine.run(whole, prompt);
  size_t half = prompt.size() / 2;
  engine.run(pieces, {prompt.data(), half});
  std::vector<float> pieces_logits =
      engine.run(pieces, {prompt.data() + half, prompt.size() - half});
  std::vector<float> single_logits;
  for (TokenId token : prompt)
    single_logits = engine.run(single, {&token, 1});
  EXPECT_EQ(whole_logits, pieces_logits);
  EXPECT_EQ(whole_logits, single_logits);
}

TEST(TransformerBatching, SequencesSharingAStepGetTheirOwnLogits) {
  Engine engine(testing::temp_model(shape_for(kernels::TensorType::q8_0)));
  const auto& tokenizer = engine.model->tokenizer();
  std::vector<TokenId> a = tokenizer.encode("a short one", true);
  std::vector<TokenId> b = tokenizer.encode("and a somewhat longer prompt than the first", true);
  KvSequence alone_a, alone_b, together_a, together_b;
  std::vector<float> expected_a = engine.run(alone_a, a);
  std::vector<float> expected_b = engine.run(alone_b, b);
  reserve(engine.cache, together_a, static_cast<int64_t>(a.size()));
  reserve(engine.cache, together_b, static_cast<int64_t>(b.size()));
  int64_t vocabulary = engine.model->config().vocabulary;
  StepChunk chunks[] = {logits_chunk(together_a, a), logits_chunk(together_b, b)};
  StepOutput output;
  engine.backend->forward(chunks, output);
  const std::vector<float>& logits = output.logits;
  ASSERT_EQ(logits.size(), static_cast<size_t>(2 * vocabulary));
  EXPECT_EQ(std::vector<float>(logits.begin(), logits.begin() + vocabulary), expected_a);
  EXPECT_EQ(std::vector<float>(logits.begin() + vocabulary, logits.end()), expected_b);
}

TEST(TransformerInput, TokenOutsideTheVocabularyIsRefused) {
  Engine engine(testing::temp_model(shape_for(kernels::TensorType::f32)));
  KvSequence sequence;
  TokenId bad = static_cast<TokenId>(engine.model->config().vocabulary);
  EXPECT_THROW(engine.run(sequence, {&bad, 1}), std::out_of_range);
}

}  // namespace
}  // namespace chatflow::engine
