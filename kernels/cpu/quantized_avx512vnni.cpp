// Integer kernels with AVX-512 VNNI on 256-bit vectors (EVEX vpdpbusd / vpdpwssd; 32 vector
// registers hold eight tokens' sums). Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni -mavx2 -mfma -mf16c.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <utility>
#include <vector>

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
  table.matmul[8] = &Tiled<Simd, detail_wide::Q4KSubBlockDots>::matmul;
  table.matmul[9] = &Tiled<Simd, detail_wide::WideDots<detail_wide::Q5K>>::matmul;
  table.matmul[10] = &Tiled<Simd, detail_wide::WideDots<detail_wide::Q6K>>::matmul;
  return table;
}

}  // namespace quantized_avx512vnni

const QuantizedKernels detail::kAvx512VnniQuantized = quantized_avx512vnni::make_table();

}  // namespace chatflow::kernels
