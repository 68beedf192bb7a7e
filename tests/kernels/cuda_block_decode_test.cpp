// The CUDA kernels' block decoders (kernels/cuda/block_decode.h), run on the host, against the
// CPU's dequantize_row bit for bit: the same bytes must give the same floats, or the GPU's
// answers differ from the CPU's for a reason no tolerance should hide. Random bytes reach every
// bit pattern of every field (scales, high bits, signs, half subnormals, infinities and NaNs);
// rows the quantiser wrote are checked too, as real files hold them.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/block_decode.h"
#include "kernels/quantize.h"
#include "kernels/tensor_type.h"

namespace chatflow::kernels {
namespace {

const TensorType kDecodedTypes[] = {
    TensorType::f32,  TensorType::f16,  TensorType::bf16, TensorType::q4_0,   TensorType::q4_1,
    TensorType::q5_0, TensorType::q5_1, TensorType::q8_0, TensorType::iq4_nl, TensorType::q2_k,
    TensorType::q3_k, TensorType::q4_k, TensorType::q5_k, TensorType::q6_k,   TensorType::iq4_xs};

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

// Every value of `row` (`columns` values of `type`) decoded one by one against the CPU's row.
void expect_identical_to_cpu(TensorType type, const std::vector<uint8_t>& row, int64_t columns,
                             const std::string& what) {
  std::vector<float> expected(static_cast<size_t>(columns));
  dequantize_row(type, row.data(), columns, expected.data());
  int mismatches = 0;
  for (int64_t i = 0; i < columns && mismatches < 5; ++i) {
    const float decoded = cuda::decode_value(type, row.data(), i);
    if (bits_of(decoded) != bits_of(expected[static_cast<size_t>(i)])) {
      ADD_FAILURE() << to_string(type) << " " << what << ": value " << i << " decodes to "
                    << decoded << " (bits " << std::hex << bits_of(decoded) << "), the CPU reads "
                    << expected[static_cast<size_t>(i)] << " (bits "
                    << bits_of(expected[static_cast<size_t>(i)]) << std::dec << ")";
      ++mismatches;
    }
  }
}

TEST(CudaBlockDecode, BlockSizesAreTheFileFormats) {
  for (TensorType type : kDecodedTypes) {
    if (!is_quantized(type)) continue;
    EXPECT_EQ(cuda::decoded_block_values(type), block_values(type)) << to_string(type);
    EXPECT_EQ(static_cast<size_t>(cuda::decoded_block_bytes(type)), block_bytes(type))
        << to_string(type);
  }
  EXPECT_EQ(cuda::decoded_block_values(TensorType::q8_1), 0) << "a type with no decoder says so";
}

TEST(CudaBlockDecode, RandomBytesDecodeAsTheCpuReadsThem) {
  std::mt19937 generator(20261207);
  std::uniform_int_distribution<int> byte(0, 255);
  for (TensorType type : kDecodedTypes) {
    const int64_t columns = 4 * 256;
    std::vector<uint8_t> row(row_bytes(type, columns));
    for (int trial = 0; trial < 64; ++trial) {
      for (auto& value : row)
        value = static_cast<uint8_t>(byte(generator));
      expect_identical_to_cpu(type, row, columns, "random bytes, trial " + std::to_string(trial));
    }
  }
}

TEST(CudaBlockDecode, QuantisedRowsDecodeAsTheCpuReadsThem) {
  std::mt19937 generator(7);
  std::normal_distribution<float> weight(0.0f, 0.02f);
  for (TensorType type : kDecodedTypes) {
    if (!computable(type)) continue;
    const int64_t columns = 8 * 256;
    std::vector<float> values(static_cast<size_t>(columns));
    for (auto& value : values)
      value = weight(generator);
    values[3] = 0.5f;  // an outlier, as real weights have
    std::vector<uint8_t> row(row_bytes(type, columns));
    quantize_row(type, values.data(), columns, row.data());
    expect_identical_to_cpu(type, row, columns, "quantised row");
  }
}

TEST(CudaBlockDecode, HalfSpecialValuesConvertExactly) {
  // Zero, negative zero, the smallest subnormal, the largest subnormal, the smallest normal,
  // the largest finite, infinities, a NaN.
  const uint16_t halves[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x0400,
                             0x7BFF, 0x7C00, 0xFC00, 0x7E01};
  const float expected[] = {0.0f,          -0.0f,    5.9604645e-8f, 6.0975552e-5f,
                            6.1035156e-5f, 65504.0f, INFINITY,      -INFINITY};
  for (size_t i = 0; i < std::size(halves); ++i) {
    const float value = cuda::half_to_float(halves[i]);
    if (i < std::size(expected)) {
      EXPECT_EQ(bits_of(value), bits_of(expected[i])) << "half " << std::hex << halves[i];
    } else {
      EXPECT_TRUE(std::isnan(value)) << "half " << std::hex << halves[i];
    }
  }
}

}  // namespace
}  // namespace chatflow::kernels
