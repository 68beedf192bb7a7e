// Integer kernels for processors with AVX2 but no VNNI: u8 x s8 products summed in pairs
// (maddubs), then to int32 (madd). Compiled with -mavx2 -mfma -mf16c.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant_blocks.h"

namespace chatflow::kernels {
namespace quantized_avx2 {

struct Simd {
  static constexpr int kTokens = 4;  // 16 registers: a decoded block, scales and 2 per token
  static __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static __m256i dot_i16(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
};

#include "kernels/cpu/quantized_impl.h"

}  // namespace quantized_avx2

const QuantizedKernels detail::kAvx2Quantized =
    quantized_avx2::make_quantized_kernels<quantized_avx2::Simd>("avx2");

}  // namespace chatflow::kernels
