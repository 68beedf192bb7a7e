// The paged KV cache: the host's block bookkeeping (KvBlockAllocator), the layout of the CPU
// backend's pool, and what a q8_0 pool costs and keeps.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "architecture_reference.h"
#include "framework/engine/cpu/cpu_kv_pool.h"
#include "framework/engine/kv_block_allocator.h"
#include "step_session.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

ModelConfig tiny_config() {
  ModelConfig config;
  config.layers = 2;
  config.kv_heads = 2;
  config.head_dim = 8;
  return config;
}

TEST(KvCacheBlocks, ReserveAllocatesWholeBlocksAllOrNothing) {
  KvBlockAllocator cache(16, 4);
  KvSequence a, b;
  EXPECT_TRUE(reserve(cache, a, 17));  // two blocks
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(cache.free_blocks(), 2);
  EXPECT_TRUE(reserve(cache, a, 32));  // still two
  EXPECT_EQ(cache.free_blocks(), 2);
  EXPECT_FALSE(reserve(cache, b, 48)) << "three blocks do not fit in two";
  EXPECT_TRUE(b.blocks.empty()) << "a failed reservation takes nothing";
  EXPECT_EQ(cache.free_blocks(), 2);
  release(cache, a);
  EXPECT_EQ(cache.free_blocks(), 4);
  EXPECT_TRUE(a.blocks.empty());
}

TEST(KvCacheBlocks, SharedBlocksReturnOnlyWithTheLastReference) {
  KvBlockAllocator cache(16, 2);
  BlockId block = *cache.allocate();
  cache.retain(block);
  EXPECT_EQ(cache.references(block), 2);
  cache.release(block);
  EXPECT_EQ(cache.free_blocks(), 1);
  cache.release(block);
  EXPECT_EQ(cache.free_blocks(), 2);
  EXPECT_THROW(cache.release(block), std::logic_error);
}

TEST(KvCacheBlocks, BlockSizeMustBeAMultipleOfSixteen) {
  EXPECT_THROW(KvBlockAllocator(12, 4), std::invalid_argument);
  EXPECT_THROW(CpuKvPool(tiny_config(), {4, 12, kernels::KvType::f16}), std::invalid_argument);
}

TEST(KvCachePool, KeyAndValueRegionsDoNotOverlap) {
  CpuKvPool cache(tiny_config(), {1, 16, kernels::KvType::f16});
  size_t region = 8 * 16 * 2;  // bytes: 16 positions of 8 halves
  EXPECT_EQ(cache.block_stride(), 2u * 2 * 2 * region);
  EXPECT_EQ(cache.key_offset(0, 1), region);
  EXPECT_EQ(cache.value_offset(0, 0), 2 * region);
  EXPECT_EQ(cache.key_offset(1, 0), 4 * region);
  EXPECT_EQ(cache.value_offset(1, 1), 7 * region);
}

TEST(KvCachePool, Q8_0RowsAreBlocksOf32ValuesAndWholeHeadsOnly) {
  ModelConfig config = tiny_config();
  config.head_dim = 64;
  CpuKvPool cache(config, {2, 16, kernels::KvType::q8_0});
  EXPECT_EQ(cache.row_bytes(), 2u * 34);
  const size_t region = 16 * 2 * 34;  // 16 positions of two 34-byte blocks
  EXPECT_EQ(cache.block_stride(), 2u * 2 * 2 * region);
  EXPECT_EQ(cache.value_offset(1, 1), 7 * region);
  const std::vector<BlockId> table = {1, 0};
  EXPECT_EQ(cache.key_index(table, 17, 0, 1), region + 1 * 68);
  EXPECT_EQ(cache.value_index(table, 3, 1, 0), cache.block_stride() + 6 * region + 3 * 68);

  config.head_dim = 48;
  try {
    CpuKvPool refused(config, {2, 16, kernels::KvType::q8_0});
    ADD_FAILURE() << "a head of 48 values is not whole q8_0 blocks";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("head_dim is 48"), std::string::npos) << error.what();
  }
}

// Models whose heads are whole q8_0 blocks (head_dim 32, grouped-query attention): llama, and
// gemma2 for sliding windows and soft-capped scores.
std::string q8_model(const std::string& architecture) {
  ModelShape shape;
  shape.architecture = architecture;
  shape.dim = 128;
  shape.heads = 4;
  shape.kv_heads = 2;
  shape.ffn = 192;
  shape.layers = 2;
  shape.context = 256;
  return testing::temp_model(shape);
}

// The largest difference from `expected`, as a fraction of its largest |logit| (at least 1).
double relative_error(const std::vector<float>& actual, const std::vector<double>& expected) {
  double scale = 1, worst = 0;
  for (double value : expected)
    scale = std::max(scale, std::fabs(value));
  for (size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, std::fabs(actual[i] - expected[i]));
  return worst / scale;
}

// Rows of one sequence: a 40-token prompt (every row; three blocks) then 12 decode tokens.
std::vector<std::vector<float>> sequence_rows(const std::string& path, kernels::KvType kv) {
  testing::StepSession session("cpu", path, kv);
  const std::vector<TokenId> prompt = testing::spread_tokens(40, 11, session.vocabulary());
  const std::vector<TokenId> decode = testing::spread_tokens(12, 12, session.vocabulary());
  KvSequence sequence;
  auto rows = session.step({{&sequence, prompt, StepChunk::Want::every_logits}})[0].rows;
  for (TokenId token : decode)
    rows.push_back(session.last_row(sequence, {token}));
  return rows;
}

std::vector<std::vector<double>> reference_rows(const std::string& path) {
  testing::ArchitectureReference reference(path);
  auto model = Model::load(path);
  const int64_t vocabulary = model->config().vocabulary;
  std::vector<std::vector<double>> rows;
  for (TokenId token : testing::spread_tokens(40, 11, vocabulary))
    rows.push_back(reference.step(token));
  for (TokenId token : testing::spread_tokens(12, 12, vocabulary))
    rows.push_back(reference.step(token));
  return rows;
}

// Tolerance, as a fraction of the reference row's largest |logit|: 1e-2. q8_0 rounds each key and
// value to within half a step of its 32-value block, d / 2 = max|x| / 254 (0.4% of the block's
// largest value, against 0.05% of each value for f16), so its logits move about ten times as far
// as f16's (measured here: f16 at most 1.2e-4, q8_0 at most 2.0e-3); a wrong scale, a missed block
// or a misplaced row is off by far more (a value block read from the next position: 0.3).
constexpr double kQ8Tolerance = 1e-2;

TEST(KvCacheQ8_0, LogitsFollowTheReferenceAndStayCloseToF16) {
  for (const std::string architecture : {"llama", "gemma2"}) {
    SCOPED_TRACE(architecture);
    const std::string path = q8_model(architecture);
    const auto expected = reference_rows(path);
    const auto f16 = sequence_rows(path, kernels::KvType::f16);
    const auto q8 = sequence_rows(path, kernels::KvType::q8_0);
    ASSERT_EQ(q8.size(), expected.size());
    double worst_f16 = 0, worst_q8 = 0, worst_apart = 0;
    for (size_t row = 0; row < expected.size(); ++row) {
      worst_f16 = std::max(worst_f16, relative_error(f16[row], expected[row]));
      const double error = relative_error(q8[row], expected[row]);
      worst_q8 = std::max(worst_q8, error);
      EXPECT_LE(error, kQ8Tolerance) << "row " << row << " (positions 0-39 prompt, then decode)";
      std::vector<double> f16_row(f16[row].begin(), f16[row].end());
      const double apart = relative_error(q8[row], f16_row);
      worst_apart = std::max(worst_apart, apart);
      EXPECT_LE(apart, kQ8Tolerance) << "row " << row << " against the f16 KV cache's";
    }
    // Rounding to 8 bits is coarser than to half precision: a q8_0 pool that matched f16 exactly
    // would not be storing q8_0.
    EXPECT_GT(worst_q8, worst_f16);
    RecordProperty("largest_error_f16_" + architecture, std::to_string(worst_f16));
    RecordProperty("largest_error_q8_0_" + architecture, std::to_string(worst_q8));
    std::printf("%s: largest error f16 %.3g, q8_0 %.3g, q8_0 against f16 %.3g\n",
                architecture.c_str(), worst_f16, worst_q8, worst_apart);
  }
}

TEST(KvCacheQ8_0, AKvPoolOfQ8_0HoldsLessThanHalfTheBytesOfF16) {
  const std::string path = q8_model("llama");
  testing::StepSession f16("cpu", path, kernels::KvType::f16, 32);
  testing::StepSession q8("cpu", path, kernels::KvType::q8_0, 32);
  const auto& types = q8.backend().info().kv_types;
  EXPECT_NE(std::find(types.begin(), types.end(), kernels::KvType::q8_0), types.end());
  const uint64_t f16_bytes = f16.backend().info().memory.kv_pool_bytes;
  const uint64_t q8_bytes = q8.backend().info().memory.kv_pool_bytes;
  // Per position, layer and key/value head: 32 halves (64 bytes) against one 34-byte block.
  const uint64_t positions = 32 * 16, rows = positions * 2 /* layers */ * 2 /* K, V */ * 2;
  EXPECT_EQ(f16_bytes, rows * 64);
  EXPECT_EQ(q8_bytes, rows * 34);
  EXPECT_LE(static_cast<double>(q8_bytes) / static_cast<double>(f16_bytes), 0.54);
  EXPECT_EQ(q8.backend().kv_block_bytes(),
            kv_block_bytes(q8.model().config(), 16, kernels::KvType::q8_0));
}

TEST(KvCacheQ8_0, ABackendListsQ8_0OnlyForHeadsOfWholeBlocks) {
  ModelShape shape;  // dim 64, 4 heads: head_dim 16
  testing::StepSession session("cpu", testing::temp_model(shape), kernels::KvType::f16, 4);
  const auto& types = session.backend().info().kv_types;
  EXPECT_EQ(std::find(types.begin(), types.end(), kernels::KvType::q8_0), types.end());
  EXPECT_THROW(testing::StepSession("cpu", testing::temp_model(shape), kernels::KvType::q8_0, 4),
               std::invalid_argument);
}

}  // namespace
}  // namespace chatflow::engine
