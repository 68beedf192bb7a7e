// The CPU float kernels against plain reference arithmetic, for every unquantised type and
// every instruction set this processor has (quantised types: quantized_kernels_test.cpp); and batch
// invariance: a row's result never depends on how many tokens or which rows share the call.
#include "kernels/cpu/cpu_kernels.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "framework/engine/model.h"
#include "kernels/half.h"
#include "kernels/quantize.h"

namespace chatflow::kernels {
namespace {

using engine::WeightMatrix;

std::vector<const CpuKernelTable*> available_tables() {
  std::vector<const CpuKernelTable*> tables;
  for (auto isa : kInstructionSets) {
    if (auto* table = cpu_kernels(isa)) tables.push_back(table);
  }
  return tables;
}

struct TestMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix view;
  std::vector<float> dequantized;  // rows x columns, what the kernels must multiply with
};

TestMatrix random_matrix(TensorType type, int64_t rows, int64_t columns, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(rows * columns));
  for (float& value : values)
    value = normal(random);
  TestMatrix matrix;
  size_t row_bytes = kernels::row_bytes(type, columns);
  matrix.bytes.resize(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(type, values.data() + r * columns, columns, matrix.bytes.data() + r * row_bytes);
  matrix.view = {type, matrix.bytes.data(), rows, columns, row_bytes};
  matrix.dequantized.resize(values.size());
  for (int64_t r = 0; r < rows; ++r)
    engine::dequantize_row(matrix.view, r, matrix.dequantized.data() + r * columns);
  return matrix;
}

std::vector<float> random_inputs(int64_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values)
    value = normal(random);
  return values;
}

std::vector<float> run_matmul(const CpuKernelTable& table, const TestMatrix& matrix,
                              const std::vector<float>& x, int64_t tokens, int64_t row_begin,
                              int64_t row_end) {
  std::vector<float> y(static_cast<size_t>(tokens * matrix.view.rows), -1.0f);
  std::vector<float> scratch(static_cast<size_t>(matmul_scratch_floats(tokens)));
  table.matmul[float_type_index(matrix.view.type)](
      {matrix.view.data, matrix.view.row_bytes, matrix.view.columns, row_begin, row_end, x.data(),
       matrix.view.columns, tokens, y.data(), matrix.view.rows, scratch.data()});
  return y;
}

// y (tokens x rows) against double-precision arithmetic on the dequantised weights.
void expect_reference_product(const std::vector<float>& y, const TestMatrix& matrix,
                              const std::vector<float>& x, int64_t tokens,
                              const std::string& what) {
  const int64_t rows = matrix.view.rows;
  const int64_t columns = matrix.view.columns;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double expected = 0;
      for (int64_t k = 0; k < columns; ++k)
        expected += static_cast<double>(matrix.dequantized[r * columns + k]) * x[t * columns + k];
      ASSERT_NEAR(y[t * rows + r], expected, 1e-4 * (1 + std::fabs(expected)))
          << what << " row " << r << " token " << t;
    }
  }
}

// Each token of `x` multiplied alone gives bit for bit its row of `together`; `run(x, tokens)`
// is the kernel call under test.
void expect_batch_invariant(
    const std::function<std::vector<float>(const std::vector<float>&, int64_t)>& run,
    const std::vector<float>& together, const std::vector<float>& x, int64_t tokens,
    const TestMatrix& matrix, const std::string& what) {
  const int64_t rows = matrix.view.rows;
  const int64_t columns = matrix.view.columns;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> alone_x(x.begin() + t * columns, x.begin() + (t + 1) * columns);
    std::vector<float> alone = run(alone_x, 1);
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(alone[r], together[t * rows + r]) << what << " token " << t << " row " << r;
  }
}

class MatmulKernels : public ::testing::TestWithParam<TensorType> {};

TEST_P(MatmulKernels, MatchReferenceArithmetic) {
  TensorType type = GetParam();
  // 96 columns: whole vectors for every instruction set; 172 (as stories260K's FFN) adds tails.
  for (int64_t columns : {int64_t{96}, int64_t{172}}) {
    if (columns % block_values(type) != 0) continue;
    const int64_t rows = 37;
    const int64_t tokens = 7;
    TestMatrix matrix = random_matrix(type, rows, columns, 11);
    std::vector<float> x = random_inputs(tokens * columns, 12);
    for (const CpuKernelTable* table : available_tables()) {
      std::vector<float> y = run_matmul(*table, matrix, x, tokens, 0, rows);
      expect_reference_product(y, matrix, x, tokens,
                               std::string(table->instruction_set) + " " +
                                   std::string(to_string(type)) + " columns " +
                                   std::to_string(columns));
    }
  }
}

TEST_P(MatmulKernels, ResultOfARowDoesNotDependOnTheBatch) {
  TensorType type = GetParam();
  const int64_t rows = 29;
  const int64_t columns = 160;
  const int64_t tokens = 9;
  TestMatrix matrix = random_matrix(type, rows, columns, 21);
  std::vector<float> x = random_inputs(tokens * columns, 22);
  for (const CpuKernelTable* table : available_tables()) {
    std::vector<float> together = run_matmul(*table, matrix, x, tokens, 0, rows);
    expect_batch_invariant(
        [&](const std::vector<float>& inputs, int64_t count) {
          return run_matmul(*table, matrix, inputs, count, 0, rows);
        },
        together, x, tokens, matrix, std::string(table->instruction_set));
    // A thread taking rows 5..17 computes them exactly as the whole call did.
    std::vector<float> partial = run_matmul(*table, matrix, x, tokens, 5, 17);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 5; r < 17; ++r)
        ASSERT_EQ(partial[t * rows + r], together[t * rows + r]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulKernels,
                         ::testing::Values(TensorType::f32, TensorType::f16, TensorType::bf16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

std::vector<uint8_t> packed(const TestMatrix& matrix) {
  const WeightMatrix& view = matrix.view;
  std::vector<uint8_t> panels(packed_bytes(view.type, view.rows, view.columns));
  pack_matrix(view.type, view.data, view.row_bytes, view.rows, view.columns, panels.data());
  return panels;
}

std::vector<float> run_packed_matmul(const CpuKernelTable& table, const TestMatrix& matrix,
                                     const std::vector<uint8_t>& panels,
                                     const std::vector<float>& x, int64_t tokens,
                                     int64_t panel_begin, int64_t panel_end) {
  std::vector<float> y(static_cast<size_t>(tokens * matrix.view.rows), -1.0f);
  table.packed_matmul[float_type_index(matrix.view.type)](
      {panels.data(), matrix.view.rows, matrix.view.columns, panel_begin, panel_end, x.data(),
       matrix.view.columns, tokens, y.data(), matrix.view.rows});
  return y;
}

class PackedMatmulKernels : public ::testing::TestWithParam<TensorType> {};

TEST_P(PackedMatmulKernels, PanelsHoldEachColumnOfThirtyTwoRowsTogether) {
  TensorType type = GetParam();
  TestMatrix matrix = random_matrix(type, 37, 5, 51);
  std::vector<uint8_t> panels = packed(matrix);
  const size_t element = block_bytes(type);
  ASSERT_EQ(panels.size(), static_cast<size_t>(64 * 5) * element);  // two panels, padded
  for (int64_t r = 0; r < 64; ++r) {
    for (int64_t k = 0; k < 5; ++k) {
      const uint8_t* stored = panels.data() + ((r / 32) * 32 * 5 + k * 32 + r % 32) * element;
      std::vector<uint8_t> expected(element, 0);
      if (r < 37) {
        std::memcpy(expected.data(), matrix.view.data + r * matrix.view.row_bytes + k * element,
                    element);
      }
      ASSERT_EQ(std::memcmp(stored, expected.data(), element), 0) << "row " << r << " col " << k;
    }
  }
}

TEST_P(PackedMatmulKernels, MatchReferenceArithmetic) {
  TensorType type = GetParam();
  const int64_t rows = 70;  // three panels, the last one six rows
  const int64_t columns = 172;
  const int64_t tokens = 27;  // two full AVX-512 tiles and a short one
  TestMatrix matrix = random_matrix(type, rows, columns, 52);
  std::vector<uint8_t> panels = packed(matrix);
  std::vector<float> x = random_inputs(tokens * columns, 53);
  for (const CpuKernelTable* table : available_tables()) {
    std::vector<float> y = run_packed_matmul(*table, matrix, panels, x, tokens, 0, 3);
    expect_reference_product(
        y, matrix, x, tokens,
        std::string(table->instruction_set) + " " + std::string(to_string(type)));
  }
}

TEST_P(PackedMatmulKernels, ResultOfARowDoesNotDependOnTheBatch) {
  TensorType type = GetParam();
  const int64_t rows = 70;
  const int64_t columns = 160;
  const int64_t tokens = 29;
  TestMatrix matrix = random_matrix(type, rows, columns, 54);
  std::vector<uint8_t> panels = packed(matrix);
  std::vector<float> x = random_inputs(tokens * columns, 55);
  for (const CpuKernelTable* table : available_tables()) {
    std::vector<float> together = run_packed_matmul(*table, matrix, panels, x, tokens, 0, 3);
    expect_batch_invariant(
        [&](const std::vector<float>& inputs, int64_t count) {
          return run_packed_matmul(*table, matrix, panels, inputs, count, 0, 3);
        },
        together, x, tokens, matrix, std::string(table->instruction_set));
    // A thread taking the middle panel computes its rows exactly as the whole call did, and
    // writes nothing else.
    std::vector<float> middle = run_packed_matmul(*table, matrix, panels, x, tokens, 1, 2);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        if (r >= 32 && r < 64) {
          ASSERT_EQ(middle[t * rows + r], together[t * rows + r]);
        } else {
          ASSERT_EQ(middle[t * rows + r], -1.0f) << "row " << r << " was written";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(UnquantisedTypes, PackedMatmulKernels,
                         ::testing::Values(TensorType::f32, TensorType::f16, TensorType::bf16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

class AttentionKernel : public ::testing::TestWithParam<KvType> {};

TEST_P(AttentionKernel, MatchesSoftmaxAttentionOverBlocks) {
  const KvType kv_type = GetParam();
  const int64_t head_dim = 24;
  const int64_t block_tokens = 16;
  const int64_t group = 3;
  const int64_t positions = 41;  // three blocks, the last one partial
  // Blocks deliberately out of order in the pool, as a real block table would be.
  const std::vector<int32_t> table = {2, 0, 1};
  const size_t block_stride = static_cast<size_t>(2 * head_dim * block_tokens);
  std::vector<float> keys = random_inputs(positions * head_dim, 31);
  std::vector<float> values = random_inputs(positions * head_dim, 32);
  // What the cache holds: halves are rounded, and the expected result uses the rounded values.
  auto stored = [&](float value) {
    return kv_type == KvType::f16 ? f16_to_f32(f32_to_f16(value)) : value;
  };
  std::vector<float> pool_f32(block_stride * 3, 0.0f);
  std::vector<uint16_t> pool_f16(block_stride * 3, 0);
  for (int64_t p = 0; p < positions; ++p) {
    size_t block = static_cast<size_t>(table[p / block_tokens]) * block_stride;
    for (int64_t d = 0; d < head_dim; ++d) {
      size_t key_at = block + d * block_tokens + p % block_tokens;
      size_t value_at = block + head_dim * block_tokens + (p % block_tokens) * head_dim + d;
      keys[p * head_dim + d] = stored(keys[p * head_dim + d]);
      values[p * head_dim + d] = stored(values[p * head_dim + d]);
      pool_f32[key_at] = keys[p * head_dim + d];
      pool_f32[value_at] = values[p * head_dim + d];
      pool_f16[key_at] = f32_to_f16(keys[p * head_dim + d]);
      pool_f16[value_at] = f32_to_f16(values[p * head_dim + d]);
    }
  }
  const void* pool = kv_type == KvType::f16 ? static_cast<const void*>(pool_f16.data())
                                            : static_cast<const void*>(pool_f32.data());
  std::vector<float> queries = random_inputs(group * head_dim, 33);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Whole attention, a sliding window starting inside the second block, a soft cap, and both.
  struct Variant {
    int64_t first_position;
    float softcap;
  };
  for (const Variant variant :
       {Variant{0, 0.0f}, Variant{21, 0.0f}, Variant{0, 0.5f}, Variant{37, 0.25f}}) {
    for (const CpuKernelTable* kernels : available_tables()) {
      std::vector<float> scores(static_cast<size_t>(group * 48));
      std::vector<float> out(static_cast<size_t>(group * head_dim));
      const size_t element = kv_row_bytes(kv_type, 1);  // the kernels take offsets in bytes
      kernels->attention[static_cast<int>(kv_type)](
          {queries.data(), group, head_dim, pool, table.data(), block_stride * element, 0,
           static_cast<size_t>(head_dim * block_tokens) * element, block_tokens, positions,
           variant.first_position, scale, variant.softcap, scores.data(), out.data()});
      for (int64_t h = 0; h < group; ++h) {
        std::vector<double> weights(static_cast<size_t>(positions), 0.0);
        double largest = -1e300;
        for (int64_t p = variant.first_position; p < positions; ++p) {
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d)
            dot += queries[h * head_dim + d] * keys[p * head_dim + d];
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
          EXPECT_NEAR(out[h * head_dim + d], expected, 1e-5)
              << kernels->instruction_set << " " << to_string(kv_type) << " head " << h << " dim "
              << d << " window from " << variant.first_position << " cap " << variant.softcap;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, AttentionKernel, ::testing::Values(KvType::f32, KvType::f16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(KvStoreKernel, F16RoundsLikeTheReferenceAndHonoursTheStride) {
  std::vector<float> values = random_inputs(37, 61);
  values[0] = 1.0f + 1.0f / 2048;  // a tie: rounds to even
  values[1] = 1e6f;                // beyond half's range: infinity
  for (const CpuKernelTable* kernels : available_tables()) {
    std::vector<uint16_t> out(37 * 3, 0xFFFF);
    kernels->store_kv[static_cast<int>(KvType::f16)](values.data(), out.data(), 37, 3);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t expected = i % 3 == 0 ? f32_to_f16(values[i / 3]) : 0xFFFF;
      ASSERT_EQ(out[i], expected) << kernels->instruction_set << " element " << i;
    }
  }
}

TEST(SiluKernel, MatchesDefinition) {
  std::vector<float> gate = random_inputs(37, 41);
  std::vector<float> up = random_inputs(37, 42);
  for (const CpuKernelTable* kernels : available_tables()) {
    std::vector<float> out(37);
    kernels->silu_multiply(gate.data(), up.data(), out.data(), 37);
    for (size_t i = 0; i < out.size(); ++i) {
      double expected = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i];
      EXPECT_NEAR(out[i], expected, 1e-5 * (1 + std::fabs(expected))) << kernels->instruction_set;
    }
  }
}

TEST(GeluKernel, MatchesTheTanhFormIncludingSaturation) {
  std::vector<float> gate = random_inputs(37, 43);
  for (float& value : gate)
    value *= 6;  // well into both tails
  gate[0] = 80.0f;
  gate[1] = -80.0f;
  std::vector<float> up = random_inputs(37, 44);
  for (const CpuKernelTable* kernels : available_tables()) {
    std::vector<float> out(37);
    kernels->gelu_multiply(gate.data(), up.data(), out.data(), 37);
    for (size_t i = 0; i < out.size(); ++i) {
      double x = gate[i];
      double expected =
          0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * up[i];
      EXPECT_NEAR(out[i], expected, 1e-5 * (1 + std::fabs(expected)))
          << kernels->instruction_set << " x " << x;
    }
  }
}

TEST(HalfPrecision, RoundTripsAndRoundsToNearestEven) {
  for (float value : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(value)), value) << value;
  }
  // 1 + 2^-11 lies exactly between two halves; it rounds to the even one, 1.0.
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 1.0f / 2048)), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(1e6f)), INFINITY);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
}

}  // namespace
}  // namespace chatflow::kernels
