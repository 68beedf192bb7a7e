// 512-bit integer kernels for the signed 32-value formats (q8_0, q4_0, q5_0, iq4_nl) on AVX-512
// BW + VNNI: two blocks per vector, their levels as signed bytes against the tokens' values
// offset to unsigned ones (vpdpbusd). Included by quantized_avx512vnni.cpp after
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

// Two blocks share a vector with their four-byte groups interleaved: int32 lane 2i holds group i
// of the first block, lane 2i + 1 group i of the second, so a vector of the two blocks' scales
// is one broadcast of a pair per token. Tokens' values are arranged the same way once per call,
// with 128 added, which makes them the unsigned operand of vpdpbusd and the weight levels the
// signed one: the product is then sum((x + 128) w) - 128 sum(w), with the second term taken once
// per pair of weight blocks for all the tokens.
inline __m512i interleave_blocks(__m256i first, __m256i second) {
  const __m512i index = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  return _mm512_permutexvar_epi32(index,
                                  _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1));
}

// Floats 0 and 1 of `pair` in every even and odd lane (vbroadcastsd: AVX-512F alone).
inline __m512 broadcast_pair(__m128 pair) {
  return _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_castps_pd(pair)));
}

// Blocks b and b + 1 (kBoth) or block b alone (the last of an odd count: its partner's lanes
// are zero and add nothing).
template <class D, int N, bool kBoth>
inline void pair_of_blocks(const uint8_t* row, int64_t b, const TokenActivations* x, __m512* sums) {
  const uint8_t* first = row + b * D::kBytes;
  const __m512i levels =
      interleave_blocks(signed_levels<D>(first),
                        kBoth ? signed_levels<D>(first + D::kBytes) : _mm256_setzero_si256());
  const __m512i offset_sums = _mm512_dpbusd_epi32(
      _mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), levels);
  const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), offset_sums);
  const __m512 weight_scales =
      broadcast_pair(_mm_setr_ps(half(first), kBoth ? half(first + D::kBytes) : 0.0f, 0, 0));
#pragma GCC unroll 8
  for (int t = 0; t < N; ++t) {
    const __m512i inputs =
        _mm512_loadu_si512(reinterpret_cast<const uint8_t*>(x[t].values + 32 * b));
    const __m512i dot = _mm512_dpbusd_epi32(start, inputs, levels);
    const __m512 input_scales =
        kBoth ? broadcast_pair(
                    _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(x[t].scales + b))))
              : broadcast_pair(_mm_load_ss(x[t].scales + b));
    sums[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(weight_scales, input_scales),
                              sums[t]);
  }
}

// How far ahead the weights are prefetched, in bytes.
inline constexpr int kPrefetchBytes = 2048;

template <class D>
struct WideLegacyDots {
  static constexpr int64_t kValues = 32;
  static constexpr bool kArranged = true;

  // Whole pairs: the last block of an odd count has a partner of zeros.
  static int64_t arranged_bytes(int64_t blocks) { return 32 * (blocks + blocks % 2); }
  static void arrange(const int8_t* values, int64_t blocks, int8_t* out) {
    const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
    const auto block = [&](int64_t b) {
      return _mm256_xor_si256(
          detail_quantized::load256(reinterpret_cast<const uint8_t*>(values + 32 * b)), offset);
    };
    for (int64_t b = 0; b < blocks; b += 2)
      _mm512_storeu_si512(
          out + 32 * b,
          interleave_blocks(block(b), b + 1 < blocks ? block(b + 1) : _mm256_setzero_si256()));
  }

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
  // Back to one block's lanes after the other's before the sum, so that it adds in the order
  // the kernels always used.
  const __m512i blockwise = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int t = 0; t < N; ++t)
    out[t] = _mm512_reduce_add_ps(_mm512_permutexvar_ps(blockwise, sums[t]));
}

}  // namespace detail_wide_legacy
