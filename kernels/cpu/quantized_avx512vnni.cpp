// Integer kernels with AVX-512 VNNI on 256-bit vectors (EVEX vpdpbusd / vpdpwssd; 32 vector
// registers hold eight tokens' sums). Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni -mavx2 -mfma -mf16c.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <utility>

#include "kernels/cpu/cpu_kernels.h"
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

}  // namespace quantized_avx512vnni

const QuantizedKernels detail::kAvx512VnniQuantized =
    quantized_avx512vnni::make_quantized_kernels<quantized_avx512vnni::Simd>("avx512-vnni");

}  // namespace chatflow::kernels
