// Integer kernels with AVX-VNNI (VEX-encoded vpdpbusd / vpdpwssd, without AVX-512: Alder Lake
// and later client processors). Compiled with -mavx2 -mfma -mf16c -mavxvnni.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant_blocks.h"

namespace chatflow::kernels {
namespace quantized_avxvnni {

struct Simd {
  static constexpr int kTokens = 4;
  static __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
  static __m256i dot_i16(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpwssd_avx_epi32(acc, a, b);
  }
};

#include "kernels/cpu/quantized_impl.h"

}  // namespace quantized_avxvnni

const QuantizedKernels detail::kAvxVnniQuantized =
    quantized_avxvnni::make_quantized_kernels<quantized_avxvnni::Simd>("avx-vnni");

}  // namespace chatflow::kernels
