// AVX-512 kernels (16 floats per vector). Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mfma -mf16c; only called when the processor has them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quantize.h"

namespace chatflow::kernels {
namespace avx512 {

struct Simd {
  using V = __m512;
  // Tokens per tile of the packed matrix product (what the registers hold).
  static constexpr int kPackedTokens = 12;
  static constexpr int kWidth = 16;
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float value) { return _mm512_set1_ps(value); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_partial(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_partial(float* p, V v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float reduce_sum(V v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  static float f16(uint16_t half) { return _cvtsh_ss(half); }
  static uint16_t to_f16(float value) { return _cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT); }
  static V load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load_f16_partial(const uint16_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), p));
  }
  static V load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V from_bf16(__m256i bits) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  static V load_bf16(const uint16_t* p) {
    return from_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load_bf16_partial(const uint16_t* p, int n) {
    return from_bf16(_mm256_maskz_loadu_epi16(mask(n), p));
  }

  // Cephes-style exp: 2^n * p(r) with r = x - n ln2 reduced to [-ln2/2, ln2/2].
  static V exp(V x) {
    x = _mm512_min_ps(_mm512_max_ps(x, set1(-87.3f)), set1(88.3f));
    V n = _mm512_roundscale_ps(_mm512_mul_ps(x, set1(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, set1(1.0f)));
    return _mm512_scalef_ps(p, n);
  }
};

#include "kernels/cpu/kernels_impl.h"

}  // namespace avx512

const CpuKernelTable detail::kAvx512Kernels = avx512::make_table<avx512::Simd>("avx512");

}  // namespace chatflow::kernels
