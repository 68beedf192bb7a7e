// What every instruction set's integer kernels share: the activation layout, the table order
// of the quantised types, and the quantisation of activations (one scalar routine for all, so
// every instruction set multiplies exactly the same int8 values).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"

namespace chatflow::kernels {

ActivationFormat activation_format(TensorType weights) {
  return block_values(weights) == kSuperBlock ? ActivationFormat::blocks256
                                              : ActivationFormat::blocks32;
}

ActivationLayout activation_layout(ActivationFormat format, int64_t columns) {
  ActivationLayout layout;
  layout.format = format;
  layout.columns = columns;
  layout.block = format == ActivationFormat::blocks256 ? kSuperBlock : kQuantBlock;
  layout.group = format == ActivationFormat::blocks256 ? 16 : 32;
  const size_t values = static_cast<size_t>((columns + 63) / 64 * 64);
  layout.scales_offset = values;
  layout.sums_offset = values + static_cast<size_t>(columns / layout.block) * 4;
  const size_t groups = static_cast<size_t>(columns / layout.group);
  layout.scaled_sums_offset = (layout.sums_offset + groups * 2 + 63) / 64 * 64;
  size_t end = layout.scaled_sums_offset + groups * 4;
  layout.token_bytes = (end + 63) / 64 * 64;
  return layout;
}

int quantized_index(TensorType type) {
  switch (type) {
    case TensorType::q4_0:
      return 0;
    case TensorType::q4_1:
      return 1;
    case TensorType::q5_0:
      return 2;
    case TensorType::q5_1:
      return 3;
    case TensorType::q8_0:
      return 4;
    case TensorType::iq4_nl:
      return 5;
    case TensorType::q2_k:
      return 6;
    case TensorType::q3_k:
      return 7;
    case TensorType::q4_k:
      return 8;
    case TensorType::q5_k:
      return 9;
    case TensorType::q6_k:
      return 10;
    case TensorType::iq4_xs:
      return 11;
    default:
      return -1;
  }
}

void quantize_activations(const float* x, const ActivationLayout& layout, uint8_t* out) {
  auto* values = reinterpret_cast<int8_t*>(out);
  auto* scales = reinterpret_cast<float*>(out + layout.scales_offset);
  auto* sums = reinterpret_cast<int16_t*>(out + layout.sums_offset);
  auto* scaled_sums = reinterpret_cast<float*>(out + layout.scaled_sums_offset);
  const bool blocks32 = layout.format == ActivationFormat::blocks32;
  for (int64_t b = 0; b < layout.columns / layout.block; ++b) {
    const float* block = x + b * layout.block;
    int8_t* block_values = values + b * layout.block;
    float largest = 0;
    for (int64_t i = 0; i < layout.block; ++i)
      largest = std::max(largest, std::fabs(block[i]));
    // The scales llama.cpp's activation blocks carry (an f16 scale for blocks of 32, the
    // reciprocal of the inverse for 256), so the two compute the same products.
    const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
    const float unrounded = largest / 127.0f;
    scales[b] = blocks32 ? as_half(unrounded) : inverse > 0 ? 1.0f / inverse : 0.0f;
    for (int64_t i = 0; i < layout.block; ++i) {
      // Round half to even without a library call: adding 1.5 * 2^23 leaves the rounded
      // integer in the low mantissa bits (|value| <= 127 here).
      float shifted = block[i] * inverse + 12582912.0f;
      int32_t bits;
      std::memcpy(&bits, &shifted, 4);
      block_values[i] = static_cast<int8_t>((bits & 0x007FFFFF) - 0x00400000);
    }
    for (int64_t g = b * layout.block / layout.group; g < (b + 1) * layout.block / layout.group;
         ++g) {
      int sum = 0;
      for (int64_t i = 0; i < layout.group; ++i)
        sum += values[g * layout.group + i];
      sums[g] = static_cast<int16_t>(sum);
      // For blocks of 32, llama.cpp's q8_1 sum: the unrounded scale times the sum, as an f16.
      scaled_sums[g] = blocks32 ? as_half(unrounded * static_cast<float>(sum))
                                : scales[b] * static_cast<float>(sum);
    }
  }
}

}  // namespace chatflow::kernels
