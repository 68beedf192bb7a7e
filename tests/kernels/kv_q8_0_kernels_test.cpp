// The q8_0 KV cache's kernels (kernels/cpu/attention_q8_0_impl.h) on every instruction set this
// processor has: the store writes llama.cpp's reference Q8_0 bytes, and attention over the
// stored blocks matches softmax attention over their dequantised values (in double) and the
// scalar table's result.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"

namespace chatflow::kernels {
namespace {

constexpr int kQ8 = static_cast<int>(KvType::q8_0);

std::vector<const CpuKernelTable*> available_tables() {
  std::vector<const CpuKernelTable*> tables;
  for (auto isa : kInstructionSets) {
    if (auto* table = cpu_kernels(isa)) tables.push_back(table);
  }
  return tables;
}

std::vector<float> random_inputs(int64_t count, uint32_t seed, float spread = 1.0f) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values)
    value = normal(random);
  return values;
}

// llama.cpp's quantize_row_q8_0_ref, written out here: d = amax / 127 stored as f16 (nearest
// even), q = roundf(x * (1 / d)).
std::vector<uint8_t> reference_q8_0(const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() / 32 * kKvQ8Bytes);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i)
      amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t half = f32_to_f16(d);
    std::memcpy(&out[b * kKvQ8Bytes], &half, 2);
    for (size_t i = 0; i < 32; ++i)
      out[b * kKvQ8Bytes + 2 + i] =
          static_cast<uint8_t>(static_cast<int8_t>(roundf(x[b * 32 + i] * id)));
  }
  return out;
}

std::vector<float> dequantized(const uint8_t* row, int64_t values) {
  std::vector<float> out(static_cast<size_t>(values));
  for (int64_t b = 0; b < values / 32; ++b) {
    uint16_t half;
    std::memcpy(&half, row + b * kKvQ8Bytes, 2);
    const float d = f16_to_f32(half);
    for (int64_t i = 0; i < 32; ++i)
      out[b * 32 + i] = d * static_cast<float>(static_cast<int8_t>(row[b * kKvQ8Bytes + 2 + i]));
  }
  return out;
}

TEST(KvQ8StoreKernel, WritesLlamaCppsReferenceBlocksOnEveryInstructionSet) {
  std::vector<float> values = random_inputs(4 * 32, 71, 3.0f);
  std::fill(values.begin() + 32, values.begin() + 64, 0.0f);  // all zero: d 0, every q 0
  values[64] = -5.0f;                                         // the extreme is negative
  values[65] = 5.0f * 63.5f / 127.0f;                         // x / d exactly 63.5: rounds away
  const std::vector<uint8_t> expected = reference_q8_0(values);
  for (const CpuKernelTable* kernels : available_tables()) {
    std::vector<uint8_t> out(expected.size() + 3, 0xAB);
    kernels->store_kv[kQ8](values.data(), out.data(), static_cast<int64_t>(values.size()), 1);
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_EQ(out[i], expected[i]) << kernels->instruction_set << " byte " << i;
    for (size_t i = expected.size(); i < out.size(); ++i)
      ASSERT_EQ(out[i], 0xAB) << kernels->instruction_set << " wrote past the row, byte " << i;
  }
  // The quantisation error is at most half a step (d / 2) per value.
  for (size_t b = 0; b < values.size() / 32; ++b) {
    std::vector<float> back = dequantized(&expected[b * kKvQ8Bytes], 32);
    float amax = 0;
    for (size_t i = 0; i < 32; ++i)
      amax = std::max(amax, std::fabs(values[b * 32 + i]));
    for (size_t i = 0; i < 32; ++i)
      EXPECT_LE(std::fabs(back[i] - values[b * 32 + i]), amax / 127.0f * 0.5f + amax * 1e-3f);
  }
}

struct Shape {
  int64_t head_dim;
  int64_t group;
};

void PrintTo(const Shape& shape, std::ostream* out) {
  *out << "head_dim " << shape.head_dim << " group " << shape.group;
}

class Q8AttentionKernel : public ::testing::TestWithParam<Shape> {};

// A pool of three blocks of two layers' worth of regions (the head's keys and values in the
// second layer, so offsets are not zero), blocks out of order in the table.
TEST_P(Q8AttentionKernel, MatchesSoftmaxAttentionOverTheDequantisedBlocks) {
  const int64_t head_dim = GetParam().head_dim;
  const int64_t group = GetParam().group;
  const int64_t block_tokens = 16;
  const int64_t positions = 41;  // three blocks, the last one partial
  const std::vector<int32_t> table = {2, 0, 1};
  const size_t row = kv_row_bytes(KvType::q8_0, head_dim);
  const size_t region = row * block_tokens;
  const size_t block_stride = 4 * region;
  const size_t key_offset = 2 * region, value_offset = 3 * region;
  std::vector<uint8_t> pool(block_stride * 3, 0);
  std::vector<float> keys(static_cast<size_t>(positions * head_dim));
  std::vector<float> values(keys.size());
  const CpuKernelTable& scalar = *cpu_kernels(InstructionSet::scalar);
  for (int64_t p = 0; p < positions; ++p) {
    // Rows of different magnitudes, as real keys have.
    std::vector<float> key = random_inputs(head_dim, 100 + static_cast<uint32_t>(p), 0.5f + p % 5);
    std::vector<float> value = random_inputs(head_dim, 300 + static_cast<uint32_t>(p));
    uint8_t* block = pool.data() + static_cast<size_t>(table[p / block_tokens]) * block_stride;
    uint8_t* key_row = block + key_offset + (p % block_tokens) * row;
    uint8_t* value_row = block + value_offset + (p % block_tokens) * row;
    scalar.store_kv[kQ8](key.data(), key_row, head_dim, 1);
    scalar.store_kv[kQ8](value.data(), value_row, head_dim, 1);
    std::vector<float> stored_key = dequantized(key_row, head_dim);
    std::vector<float> stored_value = dequantized(value_row, head_dim);
    std::copy(stored_key.begin(), stored_key.end(), keys.begin() + p * head_dim);
    std::copy(stored_value.begin(), stored_value.end(), values.begin() + p * head_dim);
  }
  std::vector<float> queries = random_inputs(group * head_dim, 33);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  struct Variant {
    int64_t first_position;
    float softcap;
  };
  for (const Variant variant :
       {Variant{0, 0.0f}, Variant{21, 0.0f}, Variant{0, 0.5f}, Variant{37, 0.25f}}) {
    std::vector<float> scalar_out;
    for (const CpuKernelTable* kernels : available_tables()) {
      std::vector<float> scores(static_cast<size_t>(group * 48), -7.0f);
      std::vector<float> out(static_cast<size_t>(group * head_dim), -7.0f);
      kernels->attention[kQ8]({queries.data(), group, head_dim, pool.data(), table.data(),
                               block_stride, key_offset, value_offset, block_tokens, positions,
                               variant.first_position, scale, variant.softcap, scores.data(),
                               out.data()});
      if (scalar_out.empty()) scalar_out = out;  // the scalar table comes first
      for (int64_t h = 0; h < group; ++h) {
        std::vector<double> weights(static_cast<size_t>(positions), 0.0);
        double largest = -1e300;
        for (int64_t p = variant.first_position; p < positions; ++p) {
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d)
            dot += static_cast<double>(queries[h * head_dim + d]) * keys[p * head_dim + d];
          weights[p] = dot * scale;
          if (variant.softcap > 0)
            weights[p] = variant.softcap * std::tanh(weights[p] / variant.softcap);
          largest = std::max(largest, weights[p]);
        }
        double total = 0;
        for (int64_t p = variant.first_position; p < positions; ++p)
          total += weights[p] = std::exp(weights[p] - largest);
        for (int64_t d = 0; d < head_dim; ++d) {
          double expected = 0;
          for (int64_t p = variant.first_position; p < positions; ++p)
            expected += weights[p] / total * values[p * head_dim + d];
          const size_t at = static_cast<size_t>(h * head_dim + d);
          ASSERT_NEAR(out[at], expected, 2e-5)
              << kernels->instruction_set << " head " << h << " dim " << d << " window from "
              << variant.first_position << " cap " << variant.softcap;
          // Only the order of float sums differs between instruction sets.
          ASSERT_NEAR(out[at], scalar_out[at], 1e-5)
              << kernels->instruction_set << " against scalar, head " << h << " dim " << d;
        }
      }
    }
  }
}

// 32: one q8 block per row; 96: AVX-512's two-block passes plus a single block; 256 with nine
// heads: a group of more than eight heads takes two passes over the keys.
INSTANTIATE_TEST_SUITE_P(Shapes, Q8AttentionKernel,
                         ::testing::Values(Shape{32, 1}, Shape{64, 4}, Shape{96, 3}, Shape{128, 8},
                                           Shape{256, 9}),
                         [](const auto& info) {
                           return "head_dim_" + std::to_string(info.param.head_dim) + "_group_" +
                                  std::to_string(info.param.group);
                         });

}  // namespace
}  // namespace chatflow::kernels
