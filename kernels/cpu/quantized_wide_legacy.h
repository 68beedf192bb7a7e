// 512-bit integer kernels for the signed 32-value formats (q8_0, q4_0, q5_0, iq4_nl) on AVX-512
// BW + VNNI: two blocks per vector, their levels as signed bytes, multiplied as |level| x
// (input with the level's sign) by vpdpbusd. Included by quantized_avx512vnni.cpp after
// quantized_impl.h. Per token: the two blocks' exact int32 sums (eight lanes each), scaled by
// d_weight x d_input in float lanes with one fused multiply-add, reduced in one fixed order at
// the end, whatever the number of tokens sharing the weights.

namespace detail_wide_legacy {

using detail_quantized::half;

// A block's levels as signed bytes, from the 256-bit kernels' format descriptions (the
// formats without a minimum: q8_0, q4_0, q5_0, iq4_nl).
template <class D>
inline __m256i signed_levels(const uint8_t* b) {
  static_assert(!D::kMin, "formats with a minimum need the minimum's term");
  if constexpr (D::kSigned) {
    return D::levels(b);
  } else {
    return _mm256_sub_epi8(D::levels(b), _mm256_set1_epi8(static_cast<char>(D::kOffset)));
  }
}

// Lanes 0..7 take element 0 of a four-float vector, lanes 8..15 element 1.
inline __m512 spread_pair(__m128 pair) {
  const __m512i index = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(pair));
}

// Blocks b and b + 1 (kBoth) or block b alone (the last of an odd count: the upper lanes are
// zero and add nothing).
template <class D, int N, bool kBoth>
inline void pair_of_blocks(const uint8_t* row, int64_t b, const TokenActivations* x, __m512* sums) {
  const uint8_t* first = row + b * D::kBytes;
  const __m256i low = signed_levels<D>(first);
  const __m256i high = kBoth ? signed_levels<D>(first + D::kBytes) : _mm256_setzero_si256();
  const __m512i levels = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
  const __m512i magnitudes = _mm512_abs_epi8(levels);
  const __mmask64 negative = _mm512_movepi8_mask(levels);
  const __m512 weight_scales =
      spread_pair(_mm_setr_ps(half(first), kBoth ? half(first + D::kBytes) : 0.0f, 0, 0));
#pragma GCC unroll 8
  for (int t = 0; t < N; ++t) {
    const auto* values = reinterpret_cast<const uint8_t*>(x[t].values + 32 * b);
    const __m512i inputs = kBoth ? _mm512_loadu_si512(values)
                                 : _mm512_zextsi256_si512(detail_quantized::load256(values));
    const __m512i signed_inputs =
        _mm512_mask_sub_epi8(inputs, negative, _mm512_setzero_si512(), inputs);
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitudes, signed_inputs);
    const __m128 input_pair =
        kBoth ? _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(x[t].scales + b)))
              : _mm_load_ss(x[t].scales + b);
    sums[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                              _mm512_mul_ps(weight_scales, spread_pair(input_pair)), sums[t]);
  }
}

// How far ahead the weights are prefetched, in bytes.
inline constexpr int kPrefetchBytes = 2048;

template <class D>
struct WideLegacyDots {
  static constexpr int64_t kValues = 32;
  template <int N>
  static void dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* out);
};

template <class D>
template <int N>
void WideLegacyDots<D>::dot(const uint8_t* row, int64_t blocks, const TokenActivations* x,
                            float* out) {
  __m512 sums[N];
  for (int t = 0; t < N; ++t)
    sums[t] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(row + b * D::kBytes) + kPrefetchBytes, _MM_HINT_T0);
    pair_of_blocks<D, N, true>(row, b, x, sums);
  }
  if (b < blocks) pair_of_blocks<D, N, false>(row, b, x, sums);
  for (int t = 0; t < N; ++t)
    out[t] = _mm512_reduce_add_ps(sums[t]);
}

}  // namespace detail_wide_legacy
