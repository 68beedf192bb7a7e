// The integer kernels for quantised weights, on every instruction set this processor has:
// activations quantised as specified, products equal to double-precision arithmetic on the
// dequantised weights and activations, and results independent of the batch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"

namespace chatflow::kernels {
namespace {

std::vector<float> normal_values(size_t count, float sigma, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> values(count);
  for (float& value : values)
    value = normal(random);
  return values;
}

std::vector<const CpuKernelTable*> available_tables() {
  std::vector<const CpuKernelTable*> tables;
  for (InstructionSet isa : kInstructionSets) {
    if (const CpuKernelTable* table = cpu_kernels(isa)) tables.push_back(table);
  }
  return tables;
}

std::string table_name(const CpuKernelTable& table) {
  return std::string(table.instruction_set) + "/" + std::string(table.quantized_instruction_set);
}

struct Problem {
  TensorType type;
  int64_t rows, columns, tokens;
  std::vector<uint8_t> weights;
  std::vector<float> dequantized;  // rows x columns
  std::vector<float> inputs;       // tokens x columns
};

Problem make_problem(TensorType type, int64_t rows, int64_t columns, int64_t tokens) {
  Problem p{type, rows, columns, tokens, {}, {}, {}};
  const size_t bytes = row_bytes(type, columns);
  std::vector<float> values = normal_values(static_cast<size_t>(rows * columns), 0.05f, 3);
  p.weights.resize(bytes * static_cast<size_t>(rows));
  p.dequantized.resize(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, values.data() + r * columns, columns, p.weights.data() + r * bytes);
    dequantize_row(type, p.weights.data() + r * bytes, columns, p.dequantized.data() + r * columns);
  }
  p.inputs = normal_values(static_cast<size_t>(tokens * columns), 1.0f, 4);
  // Outliers, as real activations have, so blocks get very different scales.
  for (size_t i = 0; i < p.inputs.size(); i += 97)
    p.inputs[i] *= 20;
  return p;
}

std::vector<uint8_t> quantized_inputs(const CpuKernelTable& table, const Problem& p,
                                      const ActivationLayout& layout, int64_t first,
                                      int64_t count) {
  std::vector<uint8_t> buffer(layout.token_bytes * static_cast<size_t>(count));
  auto quantize = table.quantize_activations[static_cast<int>(layout.format)];
  for (int64_t t = 0; t < count; ++t)
    quantize(p.inputs.data() + (first + t) * p.columns, layout,
             buffer.data() + static_cast<size_t>(t) * layout.token_bytes);
  return buffer;
}

std::vector<float> run(const CpuKernelTable& table, const Problem& p, int64_t first_token,
                       int64_t tokens, int64_t row_begin, int64_t row_end) {
  ActivationLayout layout = activation_layout(activation_format(p.type), p.columns);
  std::vector<uint8_t> x = quantized_inputs(table, p, layout, first_token, tokens);
  std::vector<float> y(static_cast<size_t>(tokens * p.rows), -1.0f);
  table.quantized_matmul[quantized_index(p.type)]({p.weights.data(), row_bytes(p.type, p.columns),
                                                   p.columns, row_begin, row_end, x.data(), &layout,
                                                   tokens, y.data(), p.rows});
  return y;
}

const TensorType kQuantized[] = {TensorType::q4_0, TensorType::q4_1, TensorType::q5_0,
                                 TensorType::q5_1, TensorType::q8_0, TensorType::iq4_nl,
                                 TensorType::q2_k, TensorType::q3_k, TensorType::q4_k,
                                 TensorType::q5_k, TensorType::q6_k, TensorType::iq4_xs};

TEST(QuantizedActivations, ValuesScalesAndSumsAreAsSpecified) {
  for (ActivationFormat format : {ActivationFormat::blocks32, ActivationFormat::blocks256}) {
    const int64_t columns = 512;
    ActivationLayout layout = activation_layout(format, columns);
    EXPECT_EQ(layout.token_bytes % 64, 0u);
    std::vector<float> x = normal_values(columns, 1.0f, 9);
    x[3] = 0;
    std::vector<uint8_t> buffer(layout.token_bytes);
    quantize_activations(x.data(), layout, buffer.data());
    TokenActivations view = token_activations(buffer.data(), layout, 0);
    for (int64_t b = 0; b < columns / layout.block; ++b) {
      float amax = 0;
      for (int64_t i = 0; i < layout.block; ++i)
        amax = std::max(amax, std::fabs(x[b * layout.block + i]));
      // llama.cpp's activation scales: an f16 amax / 127 for blocks of 32, 1 / (127 / amax)
      // for 256.
      const float expected_scale = format == ActivationFormat::blocks32
                                       ? f16_to_f32(f32_to_f16(amax / 127))
                                       : 1.0f / (127.0f / amax);
      EXPECT_EQ(view.scales[b], expected_scale);
      for (int64_t i = 0; i < layout.block; ++i) {
        int64_t k = b * layout.block + i;
        EXPECT_LE(std::abs(view.values[k]), 127);
        EXPECT_EQ(view.values[k], std::nearbyint(x[k] * (127.0f / amax)));
      }
    }
    for (int64_t g = 0; g < columns / layout.group; ++g) {
      int sum = 0;
      for (int64_t i = 0; i < layout.group; ++i)
        sum += view.values[g * layout.group + i];
      EXPECT_EQ(view.sums[g], sum);
    }
  }
}

TEST(QuantizedActivations, EveryTableWritesTheScalarRoutinesBytes) {
  for (ActivationFormat format : {ActivationFormat::blocks32, ActivationFormat::blocks256}) {
    for (int64_t columns : {256, 512, 2048}) {
      ActivationLayout layout = activation_layout(format, columns);
      std::vector<float> x = normal_values(static_cast<size_t>(columns), 1.0f, 11);
      for (size_t i = 0; i < x.size(); i += 61)
        x[i] *= 30;  // outliers
      for (int64_t i = 32; i < 64; ++i)
        x[i] = 0;  // an all-zero block
      // Not-a-number and infinite inputs: garbage in, but the same garbage on every table.
      x[130] = std::numeric_limits<float>::quiet_NaN();
      x[140] = std::numeric_limits<float>::infinity();
      x[200] = -std::numeric_limits<float>::infinity();
      uint32_t payload_bits = 0x7FC01234u;  // a NaN with a payload
      std::memcpy(&x[250], &payload_bits, 4);
      // A value half-way between two levels of its block (rounded to the even one).
      float largest = 0;
      for (int64_t i = 64; i < 64 + layout.block && i < columns; ++i)
        largest = std::max(largest, std::fabs(x[i]));
      x[65] = 2.5f / (127.0f / largest);
      std::vector<uint8_t> expected(layout.token_bytes), actual(layout.token_bytes);
      quantize_activations(x.data(), layout, expected.data());
      for (const CpuKernelTable* table : available_tables()) {
        std::fill(actual.begin(), actual.end(), 0);
        table->quantize_activations[static_cast<int>(format)](x.data(), layout, actual.data());
        // The layout's padding is not written by either; compare the fields.
        const size_t values = static_cast<size_t>(columns);
        EXPECT_TRUE(std::equal(actual.begin(), actual.begin() + values, expected.begin()))
            << table_name(*table) << " values, " << columns << " columns";
        const size_t scales = static_cast<size_t>(columns / layout.block) * 4;
        EXPECT_EQ(0, std::memcmp(actual.data() + layout.scales_offset,
                                 expected.data() + layout.scales_offset, scales))
            << table_name(*table) << " scales";
        const size_t groups = static_cast<size_t>(columns / layout.group);
        EXPECT_EQ(0, std::memcmp(actual.data() + layout.sums_offset,
                                 expected.data() + layout.sums_offset, groups * 2))
            << table_name(*table) << " sums";
        EXPECT_EQ(0, std::memcmp(actual.data() + layout.scaled_sums_offset,
                                 expected.data() + layout.scaled_sums_offset, groups * 4))
            << table_name(*table) << " scaled sums";
      }
    }
  }
}

class QuantizedMatmul : public ::testing::TestWithParam<TensorType> {};

TEST_P(QuantizedMatmul, EqualsDoublePrecisionProductOfWhatItMultiplies) {
  const TensorType type = GetParam();
  // 288 = nine 32-value blocks (not a whole super-block); 512 = two super-blocks.
  const int64_t columns = block_values(type) == kSuperBlock ? 512 : 288;
  Problem p = make_problem(type, 37, columns, 11);
  ActivationLayout layout = activation_layout(activation_format(type), columns);
  for (const CpuKernelTable* table : available_tables()) {
    std::vector<float> y = run(*table, p, 0, p.tokens, 0, p.rows);
    std::vector<uint8_t> x = quantized_inputs(*table, p, layout, 0, p.tokens);
    for (int64_t t = 0; t < p.tokens; ++t) {
      TokenActivations view = token_activations(x.data(), layout, t);
      for (int64_t r = 0; r < p.rows; ++r) {
        double expected = 0, magnitude = 0;
        for (int64_t k = 0; k < columns; ++k) {
          double input = static_cast<double>(view.values[k]) * view.scales[k / layout.block];
          expected += static_cast<double>(p.dequantized[r * columns + k]) * input;
          magnitude += std::fabs(p.dequantized[r * columns + k] * input);
        }
        // q4_1 and q5_1 take a block's minimum times the activations' stored scaled sum (as
        // llama.cpp's q8_1 does) instead of times the sum of the block's inputs.
        if (type == TensorType::q4_1 || type == TensorType::q5_1) {
          const uint8_t* row = p.weights.data() + r * row_bytes(type, columns);
          for (int64_t b = 0; b < columns / 32; ++b) {
            UnpackedBlock block;
            unpack_block(type, row + b * block_bytes(type), block);
            double sum = 0;
            for (int i = 0; i < 32; ++i)
              sum += static_cast<double>(view.values[32 * b + i]) * view.scales[b];
            expected += block.m * (view.scaled_sums[b] - sum);
          }
        }
        ASSERT_NEAR(y[t * p.rows + r], expected, 2e-6 * magnitude + 1e-9)
            << table_name(*table) << " " << to_string(type) << " row " << r << " token " << t;
      }
    }
  }
}

TEST_P(QuantizedMatmul, CloseToTheFloatProduct) {
  // What the activation rounding costs: well under a percent of the product's scale.
  const TensorType type = GetParam();
  const int64_t columns = 1024;
  Problem p = make_problem(type, 8, columns, 3);
  for (const CpuKernelTable* table : available_tables()) {
    std::vector<float> y = run(*table, p, 0, p.tokens, 0, p.rows);
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int64_t r = 0; r < p.rows; ++r) {
        double expected = 0, energy = 0;
        for (int64_t k = 0; k < columns; ++k) {
          double w = p.dequantized[r * columns + k], x = p.inputs[t * columns + k];
          expected += w * x;
          energy += w * w * x * x;
        }
        ASSERT_NEAR(y[t * p.rows + r], expected, 0.02 * std::sqrt(energy * columns))
            << table_name(*table) << " " << to_string(type);
      }
    }
  }
}

TEST_P(QuantizedMatmul, ResultOfARowDoesNotDependOnTheBatchOrTheRowRange) {
  const TensorType type = GetParam();
  // Three super-blocks, or eleven 32-value blocks (a tail of three after eight: the q8_0 tile
  // kernel's eight chains wrap). 80 rows: two groups of panels, the second short. 37 tokens:
  // two full tiles of 16 and a partial one where a kernel works in tiles.
  const int64_t columns = block_values(type) == kSuperBlock ? 768 : 352;
  Problem p = make_problem(type, 80, columns, 37);
  for (const CpuKernelTable* table : available_tables()) {
    std::vector<float> together = run(*table, p, 0, p.tokens, 0, p.rows);
    // Alone, and in runs of 2 .. 8 tokens (the few-token kernels' other lanes, and the tiles
    // that take up to eight tokens).
    for (int64_t width = 1; width <= 8; ++width) {
      for (int64_t t = 0; t + width <= p.tokens; t += width) {
        std::vector<float> few = run(*table, p, t, width, 0, p.rows);
        for (int64_t i = 0; i < width; ++i)
          for (int64_t r = 0; r < p.rows; ++r)
            ASSERT_EQ(few[i * p.rows + r], together[(t + i) * p.rows + r])
                << table_name(*table) << " token " << t + i << " of " << width << " row " << r;
      }
    }
    // Tokens 3 .. 23: a batch that starts inside a tile and ends inside another.
    std::vector<float> middle = run(*table, p, 3, 21, 0, p.rows);
    for (int64_t i = 0; i < 21; ++i)
      for (int64_t r = 0; r < p.rows; ++r)
        ASSERT_EQ(middle[i * p.rows + r], together[(3 + i) * p.rows + r])
            << table_name(*table) << " token " << 3 + i;
    std::vector<float> partial = run(*table, p, 0, p.tokens, 5, 75);
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int64_t r = 0; r < p.rows; ++r) {
        float expected = r >= 5 && r < 75 ? together[t * p.rows + r] : -1.0f;
        ASSERT_EQ(partial[t * p.rows + r], expected) << table_name(*table) << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllQuantised, QuantizedMatmul, ::testing::ValuesIn(kQuantized),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace chatflow::kernels
