// The scalar quantize_activations (quantized_common.cpp) sixteen values at a time, writing the
// same bytes: the same largest magnitude (a maximum, in any order; a NaN input leaves it as
// std::max does), the same scale, x * inverse + 1.5 * 2^23 with its mantissa bits read back
// (two roundings, never fused: this file and the scalar one are compiled with
// -ffp-contract=off), and group sums of the stored int8 values. Compiled with the AVX-512 flags.
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"

namespace chatflow::kernels {

void detail::quantize_activations_avx512(const float* x, const ActivationLayout& layout,
                                         uint8_t* out) {
  auto* values = reinterpret_cast<int8_t*>(out);
  auto* scales = reinterpret_cast<float*>(out + layout.scales_offset);
  auto* sums = reinterpret_cast<int16_t*>(out + layout.sums_offset);
  auto* scaled_sums = reinterpret_cast<float*>(out + layout.scaled_sums_offset);
  const bool blocks32 = layout.format == ActivationFormat::blocks32;
  const int64_t vectors = layout.block / 16, vectors_per_group = layout.group / 16;
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  for (int64_t b = 0; b < layout.columns / layout.block; ++b) {
    const float* block = x + b * layout.block;
    __m512 largest_lanes = _mm512_setzero_ps();
    for (int64_t v = 0; v < vectors; ++v)
      largest_lanes = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(block + 16 * v)), largest_lanes);
    const float largest = _mm512_reduce_max_ps(largest_lanes);
    const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
    const float unrounded = largest / 127.0f;
    scales[b] = blocks32 ? as_half(unrounded) : inverse > 0 ? 1.0f / inverse : 0.0f;
    const __m512 scale = _mm512_set1_ps(inverse);
    for (int64_t v = 0; v < vectors; v += vectors_per_group) {
      __m512i group_sum = _mm512_setzero_si512();
      for (int64_t u = v; u < v + vectors_per_group; ++u) {
        const __m512 shifted =
            _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(block + 16 * u), scale), magic);
        const __m512i levels = _mm512_sub_epi32(
            _mm512_and_si512(_mm512_castps_si512(shifted), _mm512_set1_epi32(0x007FFFFF)),
            _mm512_set1_epi32(0x00400000));
        const __m128i bytes = _mm512_cvtepi32_epi8(levels);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(values + b * layout.block + 16 * u), bytes);
        group_sum = _mm512_add_epi32(group_sum, _mm512_cvtepi8_epi32(bytes));
      }
      const int64_t g = (b * layout.block + 16 * v) / layout.group;
      const int sum = _mm512_reduce_add_epi32(group_sum);
      sums[g] = static_cast<int16_t>(sum);
      scaled_sums[g] = blocks32 ? as_half(unrounded * static_cast<float>(sum))
                                : scales[b] * static_cast<float>(sum);
    }
  }
}

}  // namespace chatflow::kernels
