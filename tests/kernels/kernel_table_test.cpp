// The element-wise operations of the kernel table (norms, rotations, residual adds, biases, KV
// stores, row lookups) against double-precision reference arithmetic, on every instruction set
// this processor has.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quantize.h"

namespace chatflow::kernels {
namespace {

std::vector<const CpuKernelTable*> available_tables() {
  std::vector<const CpuKernelTable*> tables;
  for (auto isa : {InstructionSet::scalar, InstructionSet::avx2, InstructionSet::avx512}) {
    if (auto* table = cpu_kernels(isa)) tables.push_back(table);
  }
  return tables;
}

std::vector<float> random_values(size_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values)
    value = normal(random);
  return values;
}

TEST(RmsNormKernel, MatchesTheDefinitionAndIsTheSameOnEveryInstructionSet) {
  const int64_t count = 67;  // not a multiple of any vector width
  std::vector<float> x = random_values(count, 1);
  std::vector<float> weight = random_values(count, 2);
  const float epsilon = 1e-5f;
  double squares = 0;
  for (float value : x)
    squares += static_cast<double>(value) * value;
  const double scale = 1.0 / std::sqrt(squares / count + epsilon);
  std::vector<float> first;
  for (const CpuKernelTable* kernels : available_tables()) {
    std::vector<float> out(count);
    kernels->rms_norm(x.data(), weight.data(), out.data(), count, epsilon);
    for (int64_t i = 0; i < count; ++i) {
      double expected = x[i] * scale * weight[i];
      ASSERT_NEAR(out[i], expected, 1e-5 * (1 + std::fabs(expected))) << kernels->instruction_set;
    }
    if (first.empty()) first = out;
    EXPECT_EQ(out, first) << kernels->instruction_set << " differs from scalar";
  }
}

TEST(RopeKernel, RotatesAdjacentPairsOrHalves) {
  const int64_t pairs = 5;
  std::vector<float> head = random_values(2 * pairs, 3);
  std::vector<double> angles = {0.0, 0.5, 1.0, 2.0, -3.0};
  std::vector<float> cosines, sines;
  for (double angle : angles) {
    cosines.push_back(static_cast<float>(std::cos(angle)));
    sines.push_back(static_cast<float>(std::sin(angle)));
  }
  for (const CpuKernelTable* kernels : available_tables()) {
    for (bool adjacent : {true, false}) {
      std::vector<float> rotated = head;
      kernels->rope(rotated.data(), cosines.data(), sines.data(), pairs, adjacent);
      for (int64_t i = 0; i < pairs; ++i) {
        int64_t a = adjacent ? 2 * i : i;
        int64_t b = adjacent ? 2 * i + 1 : i + pairs;
        double x0 = head[a], x1 = head[b];
        EXPECT_NEAR(rotated[a], x0 * std::cos(angles[i]) - x1 * std::sin(angles[i]), 1e-5);
        EXPECT_NEAR(rotated[b], x0 * std::sin(angles[i]) + x1 * std::cos(angles[i]), 1e-5);
      }
    }
  }
}

TEST(AddKernels, AddResidualsAndBroadcastBiases) {
  const int64_t width = 19, rows = 3;
  std::vector<float> y = random_values(width * rows, 4);
  std::vector<float> x = random_values(width * rows, 5);
  std::vector<float> bias = random_values(width, 6);
  for (const CpuKernelTable* kernels : available_tables()) {
    std::vector<float> sum = y;
    kernels->add(sum.data(), x.data(), width * rows);
    for (int64_t i = 0; i < width * rows; ++i)
      EXPECT_EQ(sum[i], y[i] + x[i]) << kernels->instruction_set;
    std::vector<float> biased = y;
    kernels->add_bias(biased.data(), bias.data(), width, rows);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t i = 0; i < width; ++i)
        EXPECT_EQ(biased[t * width + i], y[t * width + i] + bias[i]) << kernels->instruction_set;
    }
  }
}

TEST(KvStoreKernel, F32StoresExactlyWithTheStride) {
  std::vector<float> values = random_values(9, 7);
  for (const CpuKernelTable* kernels : available_tables()) {
    std::vector<float> out(9 * 4, -1.0f);
    kernels->store_kv[static_cast<int>(KvType::f32)](values.data(), out.data(), 9, 4);
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_EQ(out[i], i % 4 == 0 ? values[i / 4] : -1.0f) << kernels->instruction_set;
  }
}

TEST(DequantizeRowKernel, ReadsBackWhatQuantizeRowWrote) {
  std::vector<float> values = random_values(64, 8);
  for (TensorType type :
       {TensorType::f32, TensorType::f16, TensorType::bf16, TensorType::q8_0, TensorType::q4_0}) {
    std::vector<uint8_t> row(row_bytes(type, 64));
    quantize_row(type, values.data(), 64, row.data());
    // The reference: each block of 32 has its own scale, so the error is bounded by that
    // block's largest magnitude over the type's levels.
    double tolerance = type == TensorType::f32    ? 0
                       : type == TensorType::q4_0 ? 0.2
                       : type == TensorType::q8_0 ? 0.02
                                                  : 0.01;
    for (const CpuKernelTable* kernels : available_tables()) {
      std::vector<float> out(64);
      kernels->dequantize_row(type, row.data(), 64, out.data());
      for (int i = 0; i < 64; ++i) {
        EXPECT_NEAR(out[i], values[i], tolerance * (1 + std::fabs(values[i])))
            << to_string(type) << " " << kernels->instruction_set << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace chatflow::kernels
