// The integer kernels for quantised weights, written once over an instruction-set traits type
// S and compiled per instruction set (AVX2, AVX-VNNI, AVX-512 VNNI): 32 values per 256-bit
// vector, int8 activations, exact integer dot products per block. Include inside a namespace
// of its own in each instruction-set file (see kernels_impl.h).
//
// S provides kTokens (tokens sharing one decoded weight block: what the registers hold),
// dot_u8s8(acc, u, s) (acc + the sums of four u8 x s8 products per int32 lane) and
// dot_i16(acc, a, b) (acc + the sums of two int16 products per int32 lane).
//
// The fixed arithmetic of one (row, token) result: per block the integer dot product in int32
// lanes, converted and scaled by d_weight * d_activation into eight float lanes with one fused
// multiply-add; the lanes summed in one fixed order at the end. Whatever the number of tokens
// sharing a block, each token's operations are these, so batching never changes a result.
// (The including file includes <utility>, <cstring>, <cmath>, <algorithm>, <vector> and
// <immintrin.h>.)

namespace detail_quantized {

inline float half(const uint8_t* bytes) {
  uint16_t bits;
  std::memcpy(&bits, bytes, 2);
  return _cvtsh_ss(bits);
}

inline float sum_lanes(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

inline __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 16 bytes of nibbles as 32 levels: low nibbles first, then high nibbles.
inline __m256i nibbles(const uint8_t* p) {
  __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low_mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask),
                          _mm_and_si128(bytes, low_mask));
}

// 32 bits (bit i for value i) as bytes of 0x10 where set.
inline __m256i fifth_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(0x10));
}

inline __m256i iq4_lookup(__m256i indices) {
  const __m256i table =
      _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                       -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
  return _mm256_shuffle_epi8(table, indices);
}

template <int... U, class F>
inline void unrolled(std::integer_sequence<int, U...>, F&& body) {
  (body(std::integral_constant<int, U>{}), ...);
}

// ---- The 32-value formats: levels (unsigned, or signed when kSigned), an integer offset the
// levels carry, and a float minimum for q4_1 / q5_1.
struct Q4_0 {
  static constexpr int kBytes = 18, kOffset = 8;
  static constexpr bool kSigned = false, kMin = false;
  static __m256i levels(const uint8_t* b) { return nibbles(b + 2); }
  static float min(const uint8_t*) { return 0; }
};
struct Q4_1 {
  static constexpr int kBytes = 20, kOffset = 0;
  static constexpr bool kSigned = false, kMin = true;
  static __m256i levels(const uint8_t* b) { return nibbles(b + 4); }
  static float min(const uint8_t* b) { return half(b + 2); }
};
struct Q5_0 {
  static constexpr int kBytes = 22, kOffset = 16;
  static constexpr bool kSigned = false, kMin = false;
  static __m256i levels(const uint8_t* b) {
    return _mm256_or_si256(nibbles(b + 6), fifth_bits(b + 2));
  }
  static float min(const uint8_t*) { return 0; }
};
struct Q5_1 {
  static constexpr int kBytes = 24, kOffset = 0;
  static constexpr bool kSigned = false, kMin = true;
  static __m256i levels(const uint8_t* b) {
    return _mm256_or_si256(nibbles(b + 8), fifth_bits(b + 4));
  }
  static float min(const uint8_t* b) { return half(b + 2); }
};
struct Q8_0 {
  static constexpr int kBytes = 34, kOffset = 0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i levels(const uint8_t* b) { return load256(b + 2); }
  static float min(const uint8_t*) { return 0; }
};
struct Iq4Nl {
  static constexpr int kBytes = 18, kOffset = 0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i levels(const uint8_t* b) { return iq4_lookup(nibbles(b + 2)); }
  static float min(const uint8_t*) { return 0; }
};

template <class S, class D, int N>
void legacy_dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* out) {
  __m256 sums[N];
  float mins[N];
  for (int t = 0; t < N; ++t) {
    sums[t] = _mm256_setzero_ps();
    mins[t] = 0;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * D::kBytes;
    const float scale = half(block);
    const __m256i levels = D::levels(block);
    const __m256i magnitudes = D::kSigned ? _mm256_abs_epi8(levels) : levels;
#pragma GCC unroll 8
    for (int t = 0; t < N; ++t) {
      __m256i inputs = load256(reinterpret_cast<const uint8_t*>(x[t].values + 32 * b));
      if constexpr (D::kSigned) inputs = _mm256_sign_epi8(inputs, levels);
      __m256i dot = S::dot_u8s8(_mm256_setzero_si256(), magnitudes, inputs);
      if constexpr (D::kOffset != 0)
        dot = _mm256_sub_epi32(dot,
                               _mm256_setr_epi32(D::kOffset * x[t].sums[b], 0, 0, 0, 0, 0, 0, 0));
      const float input_scale = x[t].scales[b];
      sums[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scale * input_scale), sums[t]);
      if constexpr (D::kMin) mins[t] = std::fma(D::min(block), x[t].scaled_sums[b], mins[t]);
    }
  }
  for (int t = 0; t < N; ++t)
    out[t] = sum_lanes(sums[t]) + mins[t];
}

// ---- The 256-value formats: eight units of 32 levels, int16 scales per group of 16, and
// per-group corrections (the minimums, or offset x scale) applied through the activations'
// group sums.
struct KHeader {
  float d, dmin;
  alignas(32) int16_t scale[16];
  __m256i corrections;
};

struct Q2K {
  static constexpr int kBytes = 84;
  static constexpr bool kSigned = false, kMin = true, kCorrect = true;
  static void header(const uint8_t* b, KHeader& h) {
    h.d = half(b + 80);
    h.dmin = half(b + 82);
    __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m128i low_mask = _mm_set1_epi8(0x0F);
    _mm256_store_si256(reinterpret_cast<__m256i*>(h.scale),
                       _mm256_cvtepu8_epi16(_mm_and_si128(packed, low_mask)));
    h.corrections = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low_mask));
  }
  template <int U>
  static __m256i levels(const uint8_t* b) {
    return _mm256_and_si256(_mm256_srli_epi16(load256(b + 16 + 32 * (U / 4)), 2 * (U % 4)),
                            _mm256_set1_epi8(3));
  }
};

struct Q3K {
  static constexpr int kBytes = 110;
  static constexpr bool kSigned = false, kMin = false, kCorrect = true;
  static void header(const uint8_t* b, KHeader& h) {
    h.d = half(b + 108);
    h.dmin = 0;
    for (int g = 0; g < 16; ++g)
      h.scale[g] = static_cast<int16_t>(q3_scale(g, b + 96));
    h.corrections =
        _mm256_slli_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(h.scale)), 2);
  }
  template <int U>
  static __m256i levels(const uint8_t* b) {
    __m256i low = _mm256_and_si256(_mm256_srli_epi16(load256(b + 32 + 32 * (U / 4)), 2 * (U % 4)),
                                   _mm256_set1_epi8(3));
    __m256i high = _mm256_and_si256(_mm256_srli_epi16(load256(b), U), _mm256_set1_epi8(1));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
  }
};

template <bool kFive>
struct Q45K {
  static constexpr int kBytes = kFive ? 176 : 144;
  static constexpr bool kSigned = false, kMin = true, kCorrect = true;
  static void header(const uint8_t* b, KHeader& h) {
    h.d = half(b);
    h.dmin = half(b + 2);
    alignas(32) int16_t mins[16];
    for (int j = 0; j < 8; ++j) {
      int scale, min;
      k4_scale_min(j, b + 4, scale, min);
      h.scale[2 * j] = h.scale[2 * j + 1] = static_cast<int16_t>(scale);
      mins[2 * j] = mins[2 * j + 1] = static_cast<int16_t>(min);
    }
    h.corrections = _mm256_load_si256(reinterpret_cast<const __m256i*>(mins));
  }
  template <int U>
  static __m256i levels(const uint8_t* b) {
    __m256i bytes = load256(b + (kFive ? 48 : 16) + 32 * (U / 2));
    if constexpr (U % 2 == 1) bytes = _mm256_srli_epi16(bytes, 4);
    __m256i low = _mm256_and_si256(bytes, _mm256_set1_epi8(0x0F));
    if constexpr (!kFive) return low;
    __m256i high = _mm256_and_si256(_mm256_srli_epi16(load256(b + 16), U), _mm256_set1_epi8(1));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
};

struct Q6K {
  static constexpr int kBytes = 210;
  static constexpr bool kSigned = false, kMin = false, kCorrect = true;
  static void header(const uint8_t* b, KHeader& h) {
    h.d = half(b + 208);
    h.dmin = 0;
    __m256i scales =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(h.scale), scales);
    h.corrections = _mm256_slli_epi16(scales, 5);
  }
  template <int U>
  static __m256i levels(const uint8_t* b) {
    constexpr int kHalf = U / 4, kPart = U % 4;
    __m256i bytes = load256(b + 64 * kHalf + 32 * (kPart % 2));
    if constexpr (kPart >= 2) bytes = _mm256_srli_epi16(bytes, 4);
    __m256i low = _mm256_and_si256(bytes, _mm256_set1_epi8(0x0F));
    __m256i top = _mm256_and_si256(_mm256_srli_epi16(load256(b + 128 + 32 * kHalf), 2 * kPart),
                                   _mm256_set1_epi8(3));
    return _mm256_or_si256(low, _mm256_slli_epi16(top, 4));
  }
};

struct Iq4Xs {
  static constexpr int kBytes = 136;
  static constexpr bool kSigned = true, kMin = false, kCorrect = false;
  static void header(const uint8_t* b, KHeader& h) {
    h.d = half(b);
    h.dmin = 0;
    uint16_t high;
    std::memcpy(&high, b + 2, 2);
    for (int j = 0; j < 8; ++j)
      h.scale[2 * j] = h.scale[2 * j + 1] = static_cast<int16_t>(iq4xs_scale(j, high, b + 4));
    h.corrections = _mm256_setzero_si256();
  }
  template <int U>
  static __m256i levels(const uint8_t* b) {
    return iq4_lookup(nibbles(b + 8 + 16 * U));
  }
};

template <class S, class D, int N>
void k_dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* out) {
  __m256 sums[N];
  for (int t = 0; t < N; ++t)
    sums[t] = _mm256_setzero_ps();
  KHeader h;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * D::kBytes;
    D::header(block, h);
    __m256i dots[N];
    for (int t = 0; t < N; ++t)
      dots[t] = _mm256_setzero_si256();
    unrolled(std::make_integer_sequence<int, 8>{}, [&](auto unit) {
      constexpr int U = decltype(unit)::value;
      const __m256i levels = D::template levels<U>(block);
      const __m256i magnitudes = D::kSigned ? _mm256_abs_epi8(levels) : levels;
      const __m256i scales =
          _mm256_set_m128i(_mm_set1_epi16(h.scale[2 * U + 1]), _mm_set1_epi16(h.scale[2 * U]));
#pragma GCC unroll 8
      for (int t = 0; t < N; ++t) {
        __m256i inputs = load256(reinterpret_cast<const uint8_t*>(x[t].values + 256 * b + 32 * U));
        if constexpr (D::kSigned) inputs = _mm256_sign_epi8(inputs, levels);
        dots[t] = S::dot_i16(dots[t], _mm256_maddubs_epi16(magnitudes, inputs), scales);
      }
    });
#pragma GCC unroll 8
    for (int t = 0; t < N; ++t) {
      const float input_scale = x[t].scales[b];
      if constexpr (D::kCorrect) {
        __m256i group_sums = load256(reinterpret_cast<const uint8_t*>(x[t].sums + 16 * b));
        __m256i correction = _mm256_madd_epi16(group_sums, h.corrections);
        if constexpr (D::kMin) {
          sums[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[t]), _mm256_set1_ps(h.d * input_scale),
                                    sums[t]);
          sums[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(correction),
                                    _mm256_set1_ps(-h.dmin * input_scale), sums[t]);
          continue;
        }
        dots[t] = _mm256_sub_epi32(dots[t], correction);
      }
      sums[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[t]), _mm256_set1_ps(h.d * input_scale), sums[t]);
    }
  }
  for (int t = 0; t < N; ++t)
    out[t] = sum_lanes(sums[t]);
}

// The per-token dot products of one weight family, for Tiled.
template <class S, class D, bool kSuper>
struct Dots {
  static constexpr int64_t kValues = kSuper ? 256 : 32;
  template <int N>
  static void dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* out) {
    if constexpr (kSuper)
      k_dot<S, D, N>(row, blocks, x, out);
    else
      legacy_dot<S, D, N>(row, blocks, x, out);
  }
};

// Rows in chunks, tokens in tiles of S::kTokens: a chunk's weights stay in cache while every
// tile of activations passes over them. F::dot<N> computes N tokens' results for one row.
template <class S, class F>
struct Tiled {
  template <int... N>
  static void dispatch(int tokens, std::integer_sequence<int, N...>, const uint8_t* row,
                       int64_t blocks, const TokenActivations* x, float* out) {
    ((tokens == N + 1 ? F::template dot<N + 1>(row, blocks, x, out) : void()), ...);
  }

  static void matmul(const QuantizedMatmulArgs& a) {
    constexpr int64_t kRowChunk = 16;
    const int64_t blocks = a.columns / F::kValues;
    TokenActivations x[S::kTokens];
    float out[S::kTokens];
    // F::kArranged: F reads each token's values in an order of its own (F::arranged_bytes(blocks)
    // of them per token), arranged once here.
    const int8_t* arranged = nullptr;
    int64_t arranged_stride = 0;
    if constexpr (requires { F::kArranged; }) {
      thread_local std::vector<int8_t> buffer;
      arranged_stride = F::arranged_bytes(blocks);
      buffer.resize(static_cast<size_t>(a.tokens * arranged_stride));
      for (int64_t t = 0; t < a.tokens; ++t)
        F::arrange(token_activations(a.x, *a.layout, t).values, blocks,
                   buffer.data() + t * arranged_stride);
      arranged = buffer.data();
    }
    for (int64_t r0 = a.row_begin; r0 < a.row_end; r0 += kRowChunk) {
      const int64_t r1 = std::min(r0 + kRowChunk, a.row_end);
      for (int64_t t0 = 0; t0 < a.tokens; t0 += S::kTokens) {
        const int n = static_cast<int>(std::min<int64_t>(S::kTokens, a.tokens - t0));
        for (int t = 0; t < n; ++t)
          x[t] = token_activations(a.x, *a.layout, t0 + t);
        if (arranged != nullptr)
          for (int t = 0; t < n; ++t)
            x[t].values = arranged + (t0 + t) * arranged_stride;
        for (int64_t r = r0; r < r1; ++r) {
          dispatch(n, std::make_integer_sequence<int, S::kTokens>{},
                   a.weights + static_cast<size_t>(r) * a.row_bytes, blocks, x, out);
          for (int t = 0; t < n; ++t)
            a.y[(t0 + t) * a.y_stride + r] = out[t];
        }
      }
    }
  }
};

}  // namespace detail_quantized

template <class S>
constexpr QuantizedKernels make_quantized_kernels(std::string_view name) {
  using namespace detail_quantized;
  return QuantizedKernels{
      name,
      {&Tiled<S, Dots<S, Q4_0, false>>::matmul, &Tiled<S, Dots<S, Q4_1, false>>::matmul,
       &Tiled<S, Dots<S, Q5_0, false>>::matmul, &Tiled<S, Dots<S, Q5_1, false>>::matmul,
       &Tiled<S, Dots<S, Q8_0, false>>::matmul, &Tiled<S, Dots<S, Iq4Nl, false>>::matmul,
       &Tiled<S, Dots<S, Q2K, true>>::matmul, &Tiled<S, Dots<S, Q3K, true>>::matmul,
       &Tiled<S, Dots<S, Q45K<false>, true>>::matmul, &Tiled<S, Dots<S, Q45K<true>, true>>::matmul,
       &Tiled<S, Dots<S, Q6K, true>>::matmul, &Tiled<S, Dots<S, Iq4Xs, true>>::matmul}};
}
