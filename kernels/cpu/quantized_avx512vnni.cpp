// Integer kernels with AVX-512 VNNI on 256-bit vectors (EVEX vpdpbusd / vpdpwssd; 32 vector
// registers hold eight tokens' sums). Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni -mavx2 -mfma -mf16c.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <utility>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/half.h"
#include "kernels/quant_blocks.h"

namespace chatflow::kernels {
namespace quantized_avx512vnni {

struct Simd {
  static constexpr int kTokens = 8;
  static __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(acc, u, s);
  }
  static __m256i dot_i16(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpwssd_epi32(acc, a, b);
  }
};

#include "kernels/cpu/quantized_impl.h"
#include "kernels/cpu/quantized_wide_k.h"
#include "kernels/cpu/quantized_wide_legacy.h"

// The 256-bit kernels, with the k-quants of the common mixes (q4_k, q5_k, q6_k) and the signed
// 32-value formats (q4_0, q5_0, q8_0, iq4_nl) on 512 bits.
constexpr QuantizedKernels make_table() {
  QuantizedKernels table = make_quantized_kernels<Simd>("avx512-vnni");
  using detail_quantized::Tiled;
  using detail_wide_legacy::WideLegacyDots;
  table.matmul[0] = &Tiled<Simd, WideLegacyDots<detail_quantized::Q4_0>>::matmul;
  table.matmul[2] = &Tiled<Simd, WideLegacyDots<detail_quantized::Q5_0>>::matmul;
  table.matmul[4] = &Tiled<Simd, WideLegacyDots<detail_quantized::Q8_0>>::matmul;
  table.matmul[5] = &Tiled<Simd, WideLegacyDots<detail_quantized::Iq4Nl>>::matmul;
  table.matmul[8] = &Tiled<Simd, detail_wide::WideDots<detail_wide::Q4K>>::matmul;
  table.matmul[9] = &Tiled<Simd, detail_wide::WideDots<detail_wide::Q5K>>::matmul;
  table.matmul[10] = &Tiled<Simd, detail_wide::WideDots<detail_wide::Q6K>>::matmul;
  return table;
}

}  // namespace quantized_avx512vnni

const QuantizedKernels detail::kAvx512VnniQuantized = quantized_avx512vnni::make_table();

// The scalar quantize_activations' arithmetic sixteen values at a time: the same largest
// magnitude (a maximum, in any order), the same scale, x * inverse rounded half to even, and
// exact integer group sums, so every byte equals the scalar routine's.
void detail::quantize_activations_avx512(const float* x, const ActivationLayout& layout,
                                         uint8_t* out) {
  auto* values = reinterpret_cast<int8_t*>(out);
  auto* scales = reinterpret_cast<float*>(out + layout.scales_offset);
  auto* sums = reinterpret_cast<int16_t*>(out + layout.sums_offset);
  auto* scaled_sums = reinterpret_cast<float*>(out + layout.scaled_sums_offset);
  const bool blocks32 = layout.format == ActivationFormat::blocks32;
  const int64_t vectors = layout.block / 16, vectors_per_group = layout.group / 16;
  for (int64_t b = 0; b < layout.columns / layout.block; ++b) {
    const float* block = x + b * layout.block;
    __m512 largest_lanes = _mm512_setzero_ps();
    for (int64_t v = 0; v < vectors; ++v)  // a NaN input leaves the maximum as std::max does
      largest_lanes = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(block + 16 * v)), largest_lanes);
    const float largest = _mm512_reduce_max_ps(largest_lanes);
    const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
    const float unrounded = largest / 127.0f;
    scales[b] = blocks32 ? as_half(unrounded) : inverse > 0 ? 1.0f / inverse : 0.0f;
    const __m512 scale = _mm512_set1_ps(inverse);
    for (int64_t v = 0; v < vectors; v += vectors_per_group) {
      __m512i group_sum = _mm512_setzero_si512();
      for (int64_t u = v; u < v + vectors_per_group; ++u) {
        const __m512i levels =
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(block + 16 * u), scale));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(values + b * layout.block + 16 * u),
                         _mm512_cvtepi32_epi8(levels));
        group_sum = _mm512_add_epi32(group_sum, levels);
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
