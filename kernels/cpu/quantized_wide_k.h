// 512-bit integer kernels for the k-quants (AVX-512 BW + VNNI): 64 values per vector, the
// scales of a super-block unpacked with a few word operations instead of one value at a time.
// Included by quantized_avx512vnni.cpp after quantized_impl.h (it reuses its helpers and
// Kernel's tiling); the fixed per-token arithmetic is the same shape as k_dot's: exact int32
// sums per super-block, then float lanes with fused multiply-adds, reduced in one fixed order.

namespace detail_wide {

using detail_quantized::half;

inline __m512i load512(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}

// Two 256-bit halves into one vector.
inline __m512i join(__m256i low, __m256i high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

// int16 lanes of the scale vector for values 64P .. 64P + 63 (groups 4P .. 4P + 3, eight lanes
// each after maddubs), from the 16 per-group scales in lanes 0..15.
template <int P>
inline __m512i group_scales(__m512i scales) {
  const __m512i index = _mm512_set_epi16(
      4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3,
      4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2,
      4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P,
      4 * P, 4 * P, 4 * P, 4 * P, 4 * P, 4 * P, 4 * P);
  return _mm512_permutexvar_epi16(index, scales);
}

// A super-block's scales per group of 16 (int16 lanes 0..15) and the per-group corrections
// applied through the activations' group sums, with the factors they take.
struct WideHeader {
  float d, dmin;
  __m512i scales;
  __m256i corrections;  // 16 int16, one per group
};

// q4_k and q5_k: the 6-bit scales and mins of eight sub-blocks, packed in 12 bytes, as bytes
// (0-7: sub-block j's scale, 8-15: its min).
inline __m128i k4_scale_bytes(const uint8_t* packed) {
  uint32_t words[3];
  std::memcpy(words, packed, 12);
  const uint32_t low6 = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, low2 = 0x03030303u;
  return _mm_setr_epi32(
      static_cast<int>(words[0] & low6),
      static_cast<int>((words[2] & low4) | (((words[0] >> 6) & low2) << 4)),
      static_cast<int>(words[1] & low6),
      static_cast<int>(((words[2] >> 4) & low4) | (((words[1] >> 6) & low2) << 4)));
}

inline void k4_scales(const uint8_t* packed, WideHeader& h) {
  const __m128i bytes = k4_scale_bytes(packed);
  const __m128i words_scales = _mm_cvtepu8_epi16(bytes);  // 8 sub-block scales
  const __m128i words_mins = _mm_cvtepu8_epi16(_mm_srli_si128(bytes, 8));
  // Each sub-block is two groups of 16.
  h.scales =
      _mm512_castsi256_si512(_mm256_set_m128i(_mm_unpackhi_epi16(words_scales, words_scales),
                                              _mm_unpacklo_epi16(words_scales, words_scales)));
  h.corrections = _mm256_set_m128i(_mm_unpackhi_epi16(words_mins, words_mins),
                                   _mm_unpacklo_epi16(words_mins, words_mins));
}

// q4_k and q5_k: d, dmin, then the packed scales and mins.
struct K4Header {
  static constexpr bool kMin = true;
  static void header(const uint8_t* b, WideHeader& h) {
    h.d = half(b);
    h.dmin = half(b + 2);
    k4_scales(b + 4, h);
  }
};

struct Q4K : K4Header {
  static constexpr int kBytes = 144;
  // Pair P: sub-blocks 2P (low nibbles of bytes 32P..) and 2P + 1 (their high nibbles).
  template <int P>
  static __m512i levels(const uint8_t* b) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * P));
    return _mm512_and_si512(join(bytes, _mm256_srli_epi16(bytes, 4)), _mm512_set1_epi8(0x0F));
  }
};

struct Q5K : K4Header {
  static constexpr int kBytes = 176;
  template <int P>
  static __m512i levels(const uint8_t* b) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 32 * P));
    const __m512i low =
        _mm512_and_si512(join(bytes, _mm256_srli_epi16(bytes, 4)), _mm512_set1_epi8(0x0F));
    // Bit 2P (sub-block 2P) and 2P + 1 of each high byte.
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    const __m512i bits =
        _mm512_and_si512(join(_mm256_srli_epi16(high, 2 * P), _mm256_srli_epi16(high, 2 * P + 1)),
                         _mm512_set1_epi8(1));
    return _mm512_or_si512(low, _mm512_slli_epi16(bits, 4));
  }
};

struct Q6K {
  static constexpr int kBytes = 210;
  static constexpr bool kMin = false;  // an offset of 32, through the corrections
  static void header(const uint8_t* b, WideHeader& h) {
    h.d = half(b + 208);
    h.dmin = h.d;
    const __m256i scales =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    h.scales = _mm512_castsi256_si512(scales);
    h.corrections = _mm256_slli_epi16(scales, 5);
  }
  // Pair P: half P / 2 of the block; low nibbles of its 64 low bytes for even P, high for odd.
  template <int P>
  static __m512i levels(const uint8_t* b) {
    constexpr int kHalf = P / 2, kPart = P % 2;
    __m512i low = load512(b + 64 * kHalf);
    if constexpr (kPart == 1) low = _mm512_srli_epi16(low, 4);
    low = _mm512_and_si512(low, _mm512_set1_epi8(0x0F));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * kHalf));
    const __m512i top = _mm512_and_si512(
        join(_mm256_srli_epi16(high, 4 * kPart), _mm256_srli_epi16(high, 4 * kPart + 2)),
        _mm512_set1_epi8(3));
    return _mm512_or_si512(low, _mm512_slli_epi16(top, 4));
  }
};

// Per token: sum over super-blocks b of (d_b * scale_b) * (the super-block's scaled integer dot
// product, 16 int32 lanes), then of (-dmin_b * correction_g) * (the group's scaled sum): two
// fused multiply-add chains per float lane, reduced in one fixed order at the end.
// How far ahead the weights are prefetched: enough bytes in flight for one core to stream
// its rows at the memory's pace (four blocks, ~600 bytes, left a single sequence waiting on
// loads).
inline constexpr int kPrefetchBlocks = 32;

// The super-block kPrefetchBlocks ahead of `block` (three lines: up to 210 bytes), on its way.
template <class D>
inline void prefetch_ahead(const uint8_t* block) {
  const char* ahead = reinterpret_cast<const char*>(block) + kPrefetchBlocks * D::kBytes;
  _mm_prefetch(ahead, _MM_HINT_T0);
  _mm_prefetch(ahead + 64, _MM_HINT_T0);
  _mm_prefetch(ahead + 128, _MM_HINT_T0);
}

template <class D>
struct WideDots {
  static constexpr int64_t kValues = 256;
  template <int N>
  static void dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* out);
};

template <class D>
template <int N>
void WideDots<D>::dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* out) {
  __m512 sums[N];
  for (int t = 0; t < N; ++t)
    sums[t] = _mm512_setzero_ps();
  // The tokens' scales are token_bytes apart: one gather per super-block fetches all of them.
  const __m256i token_offsets =
      _mm256_setr_epi32(0, static_cast<int>(x[N > 1 ? 1 : 0].scales - x[0].scales),
                        static_cast<int>(x[N > 2 ? 2 : 0].scales - x[0].scales),
                        static_cast<int>(x[N > 3 ? 3 : 0].scales - x[0].scales),
                        static_cast<int>(x[N > 4 ? 4 : 0].scales - x[0].scales),
                        static_cast<int>(x[N > 5 ? 5 : 0].scales - x[0].scales),
                        static_cast<int>(x[N > 6 ? 6 : 0].scales - x[0].scales),
                        static_cast<int>(x[N > 7 ? 7 : 0].scales - x[0].scales));
  WideHeader h;
  alignas(32) float products[8];
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * D::kBytes;
    prefetch_ahead<D>(block);
    D::header(block, h);
    const __m512 correction_weights = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(h.corrections)), _mm512_set1_ps(-h.dmin));
    if constexpr (N == 1) {
      products[0] = x[0].scales[b] * h.d;
    } else {
      _mm256_store_ps(products,
                      _mm256_mul_ps(_mm256_i32gather_ps(x[0].scales + b, token_offsets, 4),
                                    _mm256_set1_ps(h.d)));
    }
    __m512i dots[N];
    for (int t = 0; t < N; ++t)
      dots[t] = _mm512_setzero_si512();
    detail_quantized::unrolled(std::make_integer_sequence<int, 4>{}, [&](auto pair) {
      constexpr int P = decltype(pair)::value;
      const __m512i levels = D::template levels<P>(block);
      const __m512i scales = group_scales<P>(h.scales);
#pragma GCC unroll 8
      for (int t = 0; t < N; ++t) {
        const __m512i inputs =
            load512(reinterpret_cast<const uint8_t*>(x[t].values + 256 * b + 64 * P));
        dots[t] = _mm512_dpwssd_epi32(dots[t], _mm512_maddubs_epi16(levels, inputs), scales);
      }
    });
#pragma GCC unroll 8
    for (int t = 0; t < N; ++t) {
      sums[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[t]), _mm512_set1_ps(products[t]), sums[t]);
      sums[t] =
          _mm512_fmadd_ps(correction_weights, _mm512_loadu_ps(x[t].scaled_sums + 16 * b), sums[t]);
    }
  }
  for (int t = 0; t < N; ++t)
    out[t] = _mm512_reduce_add_ps(sums[t]);
}

// q4_k with every int32 lane of a super-block's dot product holding one sub-block throughout,
// so one vpdpbusd per 64 values and token sums the products and one multiply per token applies
// all eight scales, where WideDots takes a maddubs and a vpdpwssd per 64 values.
//
// Value step Q (of four) takes from each of the 16 eight-byte words m of the packed levels
// the words Q, Q + 4, Q + 8 and Q + 12: their low nibbles are values 8Q .. 8Q + 7 of the
// sub-blocks 0, 2, 4, 6, their high nibbles of 1, 3, 5, 7, so lanes 2k and 2k + 1 hold
// sub-block (0, 2, 4, 6, 1, 3, 5, 7)[k] in every step. The activations are arranged once per call
// (arrange) into the same order. A lane sums 16 products of a level (0..15) and an int8
// (|a| <= 127), so it fits an int16 and vpmaddwd applies its scale exactly.
struct Q4KSubBlockDots {
  static constexpr int64_t kValues = 256;
  static constexpr bool kArranged = true;

  static int64_t arranged_bytes(int64_t blocks) { return 256 * blocks; }
  // Word 8Q + k of an arranged block is word 8 (k % 4) + 4 (k / 4) + Q of the activations.
  static void arrange(const int8_t* values, int64_t blocks, int8_t* out) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int8_t* in = values + 256 * b;
      int8_t* to = out + 256 * b;
      for (int q = 0; q < 4; ++q)
        for (int k = 0; k < 8; ++k)
          std::memcpy(to + 8 * (8 * q + k), in + 8 * (8 * (k % 4) + 4 * (k / 4) + q), 8);
    }
  }

  template <int Q>
  static __m512i levels(__m512i low_words, __m512i high_words) {
    const __m512i words = _mm512_permutex2var_epi64(
        low_words, _mm512_setr_epi64(Q, Q + 4, Q + 8, Q + 12, Q, Q + 4, Q + 8, Q + 12), high_words);
    return _mm512_and_si512(_mm512_srlv_epi64(words, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)),
                            _mm512_set1_epi8(0x0F));
  }

  template <int N>
  static void dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* out);
};

template <int N>
void Q4KSubBlockDots::dot(const uint8_t* row, int64_t blocks, const TokenActivations* x,
                          float* out) {
  __m512 sums[N];
  for (int t = 0; t < N; ++t)
    sums[t] = _mm512_setzero_ps();
  // Byte j of the eight scales (or minimums) is sub-block j's: lane pairs take them in the
  // order the steps give (0, 2, 4, 6, 1, 3, 5, 7); the group corrections in the natural order.
  const __m128i lane_order = _mm_setr_epi8(0, 0, 2, 2, 4, 4, 6, 6, 1, 1, 3, 3, 5, 5, 7, 7);
  const __m128i group_order = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * Q4K::kBytes;
    prefetch_ahead<Q4K>(block);
    const __m128i scale_bytes = k4_scale_bytes(block + 4);
    const __m512i scales = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(scale_bytes, lane_order));
    const __m512 correction_weights = _mm512_mul_ps(
        _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_shuffle_epi8(_mm_srli_si128(scale_bytes, 8), group_order))),
        _mm512_set1_ps(-half(block + 2)));
    const float d = half(block);
    const __m512i low_words = load512(block + 16), high_words = load512(block + 80);
    const __m512i levels[4] = {Q4KSubBlockDots::levels<0>(low_words, high_words),
                               Q4KSubBlockDots::levels<1>(low_words, high_words),
                               Q4KSubBlockDots::levels<2>(low_words, high_words),
                               Q4KSubBlockDots::levels<3>(low_words, high_words)};
#pragma GCC unroll 8
    for (int t = 0; t < N; ++t) {
      const auto* inputs = reinterpret_cast<const uint8_t*>(x[t].values + 256 * b);
      __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), levels[0], load512(inputs));
      dots = _mm512_dpbusd_epi32(dots, levels[1], load512(inputs + 64));
      dots = _mm512_dpbusd_epi32(dots, levels[2], load512(inputs + 128));
      dots = _mm512_dpbusd_epi32(dots, levels[3], load512(inputs + 192));
      const __m512i scaled = _mm512_madd_epi16(dots, scales);
      sums[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled), _mm512_set1_ps(x[t].scales[b] * d), sums[t]);
      sums[t] =
          _mm512_fmadd_ps(correction_weights, _mm512_loadu_ps(x[t].scaled_sums + 16 * b), sums[t]);
    }
  }
  for (int t = 0; t < N; ++t)
    out[t] = _mm512_reduce_add_ps(sums[t]);
}

}  // namespace detail_wide
