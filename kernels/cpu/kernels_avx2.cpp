// AVX2 kernels (8 floats per vector). Compiled with -mavx2 -mfma -mf16c; only called when the
// processor has them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quantize.h"

namespace chatflow::kernels {
namespace avx2 {

struct Simd {
  using V = __m256;
  // Tokens per tile of the packed matrix product (what the registers hold).
  static constexpr int kPackedTokens = 2;
  static constexpr int kWidth = 8;
  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float value) { return _mm256_set1_ps(value); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_partial(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_partial(float* p, V v, int n) { _mm256_maskstore_ps(p, mask(n), v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float reduce_sum(V v) {
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_movehdup_ps(half));
    return _mm_cvtss_f32(half);
  }
  static float reduce_max(V v) {
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    half = _mm_max_ss(half, _mm_movehdup_ps(half));
    return _mm_cvtss_f32(half);
  }
  static float f16(uint16_t half) { return _cvtsh_ss(half); }
  static uint16_t to_f16(float value) { return _cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT); }
  static V load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V load_f16_partial(const uint16_t* p, int n) {
    alignas(16) uint16_t buffer[8] = {};
    std::memcpy(buffer, p, static_cast<size_t>(n) * 2);
    return load_f16(buffer);
  }
  static V load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V from_bf16(__m128i bits) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
  static V load_bf16(const uint16_t* p) {
    return from_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V load_bf16_partial(const uint16_t* p, int n) {
    alignas(16) uint16_t buffer[8] = {};
    std::memcpy(buffer, p, static_cast<size_t>(n) * 2);
    return load_bf16(buffer);
  }

  static V exp(V x) {
    x = _mm256_min_ps(_mm256_max_ps(x, set1(-87.3f)), set1(88.3f));
    V n = _mm256_round_ps(_mm256_mul_ps(x, set1(1.44269504088896341f)),
                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set1(1.0f)));
    __m256i exponent =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
  }
};

#include "kernels/cpu/kernels_impl.h"

}  // namespace avx2

const CpuKernelTable detail::kAvx2Kernels = avx2::make_table<avx2::Simd>("avx2");

}  // namespace chatflow::kernels
