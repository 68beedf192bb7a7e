// Integer kernels on AMX-INT8 tiles for the types of the common files (q4_k and q6_k of Q4_K_M,
// q8_0), with AVX-512 VNNI for products over too few tokens to fill a tile. Compiled with
// -mamx-tile -mamx-int8 and the AVX-512 VNNI flags.
//
// A tile multiply sums a whole block exactly in int32, so both paths share one arithmetic per
// (row, token), which the AVX-512 path reproduces by reducing each block's lanes to one int32
// before any float is formed:
//   q8_0: y = fma(float(sum_k q_k a_k), d_w * d_a, y) per 32-value block;
//   q4_k: y = fma(float(sum_k sc_j q_k a_k), d * d_a, y), then
//         y = fma(float(sum_k m_j a_k), (-dmin) * d_a, y) per super-block;
//   q6_k: y = fma(float(sum_k sc_g (q_k - 32) a_k), d * d_a, y) per super-block;
// blocks in increasing order from y = 0. So a row's result never depends on how many tokens
// share the call or which path took them.
//
// The tile layout: weights are the tiles' left operand, one row of the matrix per tile row
// (64 values, or 32 for q8_0), unpacked per panel of 16 rows into int8 planes the tile
// multiplies exactly: q4_k's sc_j x q_k (0..945) as low and high bytes, and its m_j per value;
// q6_k's sc_g x (q_k - 32) as an unsigned low byte and a signed high byte; q8_0's levels. The
// activations are the right operand, 16 tokens per tile in the VNNI order (four consecutive
// values of one token per int32), packed once per call.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/quant_blocks.h"

namespace chatflow::kernels {
namespace quantized_amx {

#include "kernels/cpu/quantized_impl.h"
#include "kernels/cpu/quantized_wide_k.h"

namespace {

using detail_quantized::half;

// Fewer tokens than this go through the AVX-512 path: a tile would be mostly padding, and one
// token's product is bound by reading the weights, which that path streams with prefetch.
constexpr int64_t kTileMinTokens = 5;
constexpr int kTileRows = 16;
// Up to this many tokens, q4_k takes the split-sub-block tiles (Q4KSplitTiles): half a tile's
// columns would be padding anyway, and its weights need no scaling as they are unpacked.
constexpr int kSplitTokens = 8;

// ---- The AVX-512 path: one (row, token) at a time, each block's sum reduced to one int32.

inline constexpr int kPrefetchBytes = 2048;

// The int32 sums of eight vectors of eight lanes, in one vector (lane i: vector i).
inline __m256i sum_each(const __m256i v[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

inline int32_t sum_lanes(__m256i v) {
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  sum = _mm_add_epi32(sum, _mm_unpackhi_epi64(sum, sum));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 1));
  return _mm_cvtsi128_si32(sum);
}

inline __m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// N tokens (N < kTileMinTokens) against one row, the weights decoded once for all of them and
// the tokens' block sums reduced together; lane t of the float vectors is token t.
// Lane j: the sum of block j's eight int32 lanes, block 2k in the low half of z[k] and 2k + 1
// in its high half.
inline __m256i sum_blocks(const __m512i z[4]) {
  const __m512i u =
      _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
  const __m512i v =
      _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
  // Per 128-bit lane L: the sums of lane L of z[0], z[1], z[2], z[3].
  const __m512i w = _mm512_add_epi32(_mm512_unpacklo_epi64(u, v), _mm512_unpackhi_epi64(u, v));
  const __m256i low = _mm512_castsi512_si256(w), high = _mm512_extracti64x4_epi64(w, 1);
  const __m128i even = _mm_add_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1));
  const __m128i odd =
      _mm_add_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
  return _mm256_set_m128i(_mm_unpackhi_epi32(even, odd), _mm_unpacklo_epi32(even, odd));
}

// N tokens (N < kTileMinTokens) against one row, the weights decoded once for all of them and
// the block sums reduced eight blocks at a time; lane j of a token's chains takes the blocks
// b with b % 8 == j, as the tile path's chains do.
struct Q8_0Rows {
  static constexpr int64_t kValues = 32;
  template <int N>
  static void dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* y) {
    __m256 chains[N];
    for (auto& chain : chains)
      chain = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
      const int count = static_cast<int>(std::min<int64_t>(8, blocks - b0));
      const uint8_t* first = row + b0 * 34;
      for (int line = 0; line < 5; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(first) + kPrefetchBytes + 64 * line,
                     _MM_HINT_T0);
      const __mmask8 present = static_cast<__mmask8>((1u << count) - 1);
      // The eight blocks' weight scales (half floats, 34 bytes apart; missing blocks zero).
      __m128i scale_bits = _mm_setzero_si128();
      if (count == 8) {
        // Words 17j of the 272 bytes, picked by two word permutes rather than eight inserts.
        const __m512i first_words = _mm512_permutex2var_epi16(
            _mm512_loadu_si512(first), _mm512_setr_epi64(0x0033002200110000ll, 0, 0, 0, 0, 0, 0, 0),
            _mm512_loadu_si512(first + 64));
        const __m512i last_words =
            _mm512_permutex2var_epi16(_mm512_loadu_si512(first + 128),
                                      _mm512_setr_epi64(0, 0x0037002600150004ll, 0, 0, 0, 0, 0, 0),
                                      _mm512_loadu_si512(first + 192));
        scale_bits = _mm512_castsi512_si128(_mm512_mask_mov_epi16(first_words, 0xF0, last_words));
      } else {
        detail_quantized::unrolled(std::make_integer_sequence<int, 8>{}, [&](auto index) {
          constexpr int J = decltype(index)::value;
          uint16_t bits = 0;
          if (J < count) std::memcpy(&bits, first + 34 * J, 2);
          scale_bits = _mm_insert_epi16(scale_bits, bits, J);
        });
      }
      const __m256 weight_scales = _mm256_cvtph_ps(scale_bits);
      // Blocks 2k and 2k + 1 in one vector (missing blocks zero).
      __m512i magnitudes[4];
      __mmask64 negative[4];
      for (int k = 0; k < 4; ++k) {
        const __m256i even =
            2 * k < count ? detail_quantized::load256(first + 68 * k + 2) : _mm256_setzero_si256();
        const __m256i odd = 2 * k + 1 < count ? detail_quantized::load256(first + 68 * k + 36)
                                              : _mm256_setzero_si256();
        const __m512i levels = _mm512_inserti64x4(_mm512_castsi256_si512(even), odd, 1);
        magnitudes[k] = _mm512_abs_epi8(levels);
        negative[k] = _mm512_movepi8_mask(levels);
      }
      for (int t = 0; t < N; ++t) {
        const auto* values = reinterpret_cast<const uint8_t*>(x[t].values) + 32 * b0;
        __m512i dots[4];
        for (int k = 0; k < 4; ++k) {
          // Past the row's last block the inputs may be anything: their weights are zero.
          const __mmask64 loaded = 2 * k + 1 < count ? ~0ull : 2 * k < count ? 0xFFFFFFFFull : 0;
          const __m512i inputs = _mm512_maskz_loadu_epi8(loaded, values + 64 * k);
          const __m512i signed_inputs =
              _mm512_mask_sub_epi8(inputs, negative[k], _mm512_setzero_si512(), inputs);
          dots[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitudes[k], signed_inputs);
        }
        const __m256 input_scales = _mm256_maskz_loadu_ps(present, x[t].scales + b0);
        chains[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_blocks(dots)),
                                    _mm256_mul_ps(input_scales, weight_scales), chains[t]);
      }
    }
    for (int t = 0; t < N; ++t) {
      // ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)), as the tile path adds its chains.
      alignas(32) float c[8];
      _mm256_store_ps(c, chains[t]);
      y[t] = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
    }
  }
};

template <class D>  // detail_wide::Q4K or detail_wide::Q6K
struct KRows {
  static constexpr int64_t kValues = 256;
  template <int N>
  static void dot(const uint8_t* row, int64_t blocks, const TokenActivations* x, float* y) {
    static_assert(N <= 4);
    __m128 sums = _mm_setzero_ps();
    detail_wide::WideHeader h;
    // Lanes 0-3: the tokens' products; 4-7: their corrections (q4_k's minimums).
    __m256i halves[8];
    for (auto& half_sums : halves)
      half_sums = _mm256_setzero_si256();
    alignas(16) float input_scales[4] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * D::kBytes;
      detail_wide::prefetch_ahead<D>(block);
      D::header(block, h);
      __m512i dots[N];
      for (int t = 0; t < N; ++t)
        dots[t] = _mm512_setzero_si512();
      detail_quantized::unrolled(std::make_integer_sequence<int, 4>{}, [&](auto pair) {
        constexpr int P = decltype(pair)::value;
        const __m512i levels = D::template levels<P>(block);
        const __m512i scales = detail_wide::group_scales<P>(h.scales);
        for (int t = 0; t < N; ++t) {
          const __m512i inputs = _mm512_loadu_si512(x[t].values + 256 * b + 64 * P);
          dots[t] = _mm512_dpwssd_epi32(dots[t], _mm512_maddubs_epi16(levels, inputs), scales);
        }
      });
      if constexpr (N == 1) {
        // One token: two plain reductions, then the same float steps lane 0 takes below.
        const int32_t corrections = sum_lanes(_mm256_madd_epi16(
            detail_quantized::load256(reinterpret_cast<const uint8_t*>(x[0].sums + 16 * b)),
            h.corrections));
        int32_t products = _mm512_reduce_add_epi32(dots[0]);
        const float input_scale = x[0].scales[b];
        if constexpr (!D::kMin) products -= corrections;
        float total = _mm_cvtss_f32(sums);
        total = std::fma(static_cast<float>(products), input_scale * h.d, total);
        if constexpr (D::kMin)
          total = std::fma(static_cast<float>(corrections), input_scale * -h.dmin, total);
        sums = _mm_set_ss(total);
        continue;
      }
      for (int t = 0; t < N; ++t) {
        const __m256i corrections = _mm256_madd_epi16(
            detail_quantized::load256(reinterpret_cast<const uint8_t*>(x[t].sums + 16 * b)),
            h.corrections);
        if constexpr (D::kMin) {
          halves[t] = fold(dots[t]);
          halves[4 + t] = corrections;
        } else {
          halves[t] = _mm256_sub_epi32(fold(dots[t]), corrections);
        }
        input_scales[t] = x[t].scales[b];
      }
      const __m256 totals = _mm256_cvtepi32_ps(sum_each(halves));
      const __m128 scales = _mm_load_ps(input_scales);
      sums =
          _mm_fmadd_ps(_mm256_castps256_ps128(totals), _mm_mul_ps(scales, _mm_set1_ps(h.d)), sums);
      if constexpr (D::kMin) {
        sums = _mm_fmadd_ps(_mm256_extractf128_ps(totals, 1),
                            _mm_mul_ps(scales, _mm_set1_ps(-h.dmin)), sums);
      }
    }
    alignas(16) float out[4];
    _mm_store_ps(out, sums);
    for (int t = 0; t < N; ++t)
      y[t] = out[t];
  }
};

template <class R, int N>
void rows_for_tokens(const QuantizedMatmulArgs& a) {
  const int64_t blocks = a.columns / R::kValues;
  TokenActivations x[N];
  for (int t = 0; t < N; ++t)
    x[t] = token_activations(a.x, *a.layout, t);
  float y[N];
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    R::template dot<N>(a.weights + static_cast<size_t>(r) * a.row_bytes, blocks, x, y);
    for (int t = 0; t < N; ++t)
      a.y[t * a.y_stride + r] = y[t];
  }
}

// ---- The tile path: 16 weight rows by 32 tokens (two input tiles sharing each weight tile).

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t column_bytes[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-1: weight planes; 2-3: the two input tiles; 4-7: int32 sums, plane p of input tile
// i in tile 4 + 2i + p.
void configure_tiles(int weight_bytes) {
  TileConfig config;
  for (int t = 0; t < 2; ++t) {
    config.rows[t] = kTileRows;
    config.column_bytes[t] = static_cast<uint16_t>(weight_bytes);
    config.rows[2 + t] = static_cast<uint8_t>(weight_bytes / 4);
    config.column_bytes[2 + t] = 64;
  }
  for (int t = 4; t < 8; ++t) {
    config.rows[t] = kTileRows;
    config.column_bytes[t] = 64;
  }
  _tile_loadconfig(&config);
}

// A 64-byte-aligned view of a thread's scratch vector of at least `bytes`.
uint8_t* scratch(std::vector<uint8_t>& buffer, size_t bytes) {
  if (buffer.size() < bytes + 64) buffer.resize(bytes + 64);
  auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - address % 64) % 64);
}

// Sixteen rows of sixteen int32 into sixteen columns.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Lane L of r[4i + j] now holds element 4L + j of rows 4i .. 4i + 3.
  __m512i out[16];
  for (int j = 0; j < 4; ++j) {
    const __m512i even_a = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);
    const __m512i odd_a = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xDD);
    const __m512i even_b = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
    const __m512i odd_b = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xDD);
    out[j] = _mm512_shuffle_i32x4(even_a, even_b, 0x88);
    out[8 + j] = _mm512_shuffle_i32x4(even_a, even_b, 0xDD);
    out[4 + j] = _mm512_shuffle_i32x4(odd_a, odd_b, 0x88);
    out[12 + j] = _mm512_shuffle_i32x4(odd_a, odd_b, 0xDD);
  }
  for (int i = 0; i < 16; ++i)
    r[i] = out[i];
}

// The activations of every token as tiles of 16 tokens, an even number of them (missing tokens
// zero): per tile, columns / 4 rows of 64 bytes (row k / 4 holds values k .. k + 3 of each
// token), each block's 16 input scales, and for the 256-value format each sub-block pair's
// int8 sums as int16 pairs (s_2p, s_2p+1) per token.
// With `split_groups` G (2 or 4; at most kSplitTokens tokens): each 64-value step is cut into G
// groups of 64 / G values, and column g * (16 / G) + t of a value tile holds token t's group g
// (the other groups zero), 16 / G tokens per value tile (so G / 2 of them), so one multiply by
// unscaled levels gives each group's sum apart. Scales and sums stay one tile, per token.
struct PackedInputs {
  const uint8_t* values;
  const float* scales;
  const int32_t* pair_sums;  // [tile][block][pair][token]
  size_t tile_bytes;
  int64_t blocks;
  int64_t tiles;
};

PackedInputs pack_inputs(const QuantizedMatmulArgs& a, int64_t block_values, bool pair_sums_wanted,
                         int split_groups = 0) {
  thread_local std::vector<uint8_t> value_buffer, scale_buffer, sum_buffer;
  const int64_t chunks = (a.columns + 63) / 64;
  PackedInputs packed;
  packed.tiles = split_groups ? 1 : (a.tokens + 2 * kTileRows - 1) / (2 * kTileRows) * 2;
  const int value_tiles = split_groups ? std::max(split_groups / 2, 1) : 1;
  packed.blocks = a.columns / block_values;
  packed.tile_bytes = static_cast<size_t>(chunks) * kTileRows * 64;
  const size_t tile_blocks = static_cast<size_t>(packed.blocks * packed.tiles);
  uint8_t* values =
      scratch(value_buffer, packed.tile_bytes * static_cast<size_t>(packed.tiles * value_tiles));
  auto* scales =
      reinterpret_cast<float*>(scratch(scale_buffer, sizeof(float) * kTileRows * tile_blocks));
  auto* pair_sums = reinterpret_cast<int32_t*>(
      scratch(sum_buffer, pair_sums_wanted ? sizeof(int32_t) * 4 * kTileRows * tile_blocks : 0));
  for (int64_t tile = 0; tile < packed.tiles; ++tile) {
    TokenActivations x[kTileRows];
    const int64_t first = tile * kTileRows;
    const int count = static_cast<int>(std::clamp<int64_t>(a.tokens - first, 0, kTileRows));
    for (int t = 0; t < count; ++t)
      x[t] = token_activations(a.x, *a.layout, first + t);
    for (int v = 0; v < value_tiles; ++v) {
      uint8_t* out = values + (tile * value_tiles + v) * packed.tile_bytes;
      for (int64_t c = 0; c < chunks; ++c) {
        __m512i rows[16];
        if (split_groups) {
          const int per_tile = kTileRows / split_groups, width = 64 / split_groups;
          for (int g = 0; g < split_groups; ++g) {
            const auto group = static_cast<__mmask64>(((1ull << width) - 1) << (g * width));
            for (int t = 0; t < per_tile; ++t) {
              const int token = v * per_tile + t;
              rows[g * per_tile + t] = _mm512_maskz_loadu_epi8(
                  token < count ? group : 0, x[std::min(token, kTileRows - 1)].values + 64 * c);
            }
          }
        } else {
          for (int t = 0; t < 16; ++t)
            rows[t] = t < count ? _mm512_loadu_si512(x[t].values + 64 * c) : _mm512_setzero_si512();
        }
        transpose16(rows);
        for (int i = 0; i < 16; ++i)
          _mm512_store_si512(out + (16 * c + i) * 64, rows[i]);
      }
    }
    float* tile_scales = scales + tile * packed.blocks * kTileRows;
    for (int64_t b = 0; b < packed.blocks; ++b)
      for (int t = 0; t < 16; ++t)
        tile_scales[b * kTileRows + t] = t < count ? x[t].scales[b] : 0.0f;
    if (!pair_sums_wanted) continue;
    int32_t* tile_sums = pair_sums + tile * packed.blocks * 4 * kTileRows;
    for (int64_t b = 0; b < packed.blocks; ++b) {
      for (int p = 0; p < 4; ++p) {
        for (int t = 0; t < 16; ++t) {
          int32_t pair = 0;
          if (t < count) {
            const int16_t* g = x[t].sums + 16 * b + 4 * p;  // groups of 16: two per sub-block
            const auto even = static_cast<uint16_t>(g[0] + g[1]);
            const auto odd = static_cast<uint16_t>(g[2] + g[3]);
            pair = static_cast<int32_t>(static_cast<uint32_t>(even) |
                                        (static_cast<uint32_t>(odd) << 16));
          }
          tile_sums[(b * 4 + p) * kTileRows + t] = pair;
        }
      }
    }
  }
  packed.values = values;
  packed.scales = scales;
  packed.pair_sums = pair_sums_wanted ? pair_sums : nullptr;
  return packed;
}

// Where row i's values of one step (the `bytes` values one tile multiply covers) are in a
// plane: each step's 16 rows side by side, so a tile loads one contiguous kilobyte.
inline size_t step_offset(int64_t step, int i, int bytes) {
  return static_cast<size_t>((step * kTileRows + i) * bytes);
}

// One panel's weights as tile planes of 16 rows x columns bytes (step by step), per block and row
// the float factors of the block's sums, and (q4_k) each sub-block pair's minimums as int16 pairs.
struct Panel {
  uint8_t* plane[2];
  float* factor[2];        // [block * 16 + row]
  int32_t* minimum_pairs;  // [block][row][pair]
  uint8_t* sub_scales;     // [block][row][16]: the split path's scales (q4_k's 8)
  // q8_0, a whole panel: the tiles load the levels straight from the rows (block b of row i at
  // direct + i * direct_stride + 34 * b), nothing unpacked but the scales.
  const uint8_t* direct = nullptr;
  size_t direct_stride = 0;
};

// Panels unpacked together: each input tile pair then serves all of them from the cache.
constexpr int kPanelGroup = 4;

Panel panel_buffers(int slot, int64_t columns, int64_t blocks, int planes, int factors,
                    bool minimums, bool sub_scales = false) {
  thread_local std::vector<uint8_t> plane_buffers[kPanelGroup], factor_buffers[kPanelGroup],
      minimum_buffers[kPanelGroup], sub_scale_buffers[kPanelGroup];
  std::vector<uint8_t>& plane_buffer = plane_buffers[slot];
  std::vector<uint8_t>& factor_buffer = factor_buffers[slot];
  std::vector<uint8_t>& minimum_buffer = minimum_buffers[slot];
  const size_t plane_bytes = static_cast<size_t>(kTileRows * columns);
  uint8_t* base = scratch(plane_buffer, plane_bytes * static_cast<size_t>(planes));
  auto* factor_base = reinterpret_cast<float*>(
      scratch(factor_buffer, sizeof(float) * kTileRows * static_cast<size_t>(blocks * factors)));
  Panel panel{};
  for (int p = 0; p < planes; ++p)
    panel.plane[p] = base + plane_bytes * static_cast<size_t>(p);
  for (int f = 0; f < factors; ++f)
    panel.factor[f] = factor_base + static_cast<size_t>(f * blocks * kTileRows);
  if (minimums) {
    panel.minimum_pairs = reinterpret_cast<int32_t*>(
        scratch(minimum_buffer, sizeof(int32_t) * 4 * kTileRows * static_cast<size_t>(blocks)));
  }
  if (sub_scales) {
    panel.sub_scales =
        scratch(sub_scale_buffers[slot], 16 * kTileRows * static_cast<size_t>(blocks));
  }
  return panel;
}

// Both input tiles' sums of one block, through the 16 x 16 int32 tiles.
struct BlockSums {
  alignas(64) int32_t plane[2][2][kTileRows * 16];  // [input tile][plane]
};

// The two-plane sums (low + 256 x high) of row r for input tile i.
inline __m512i two_plane_sum(const BlockSums& sums, int i, int r) {
  return _mm512_add_epi32(_mm512_load_si512(sums.plane[i][0] + 16 * r),
                          _mm512_slli_epi32(_mm512_load_si512(sums.plane[i][1] + 16 * r), 8));
}

// Products of 64 levels (unsigned bytes) with per-value scales (signed bytes, |scale x level|
// < 2^15) as two planes, the products' low bytes and their high bytes, without widening: one
// maddubs takes the even values (the odd scale bytes zero), one the odd, and byte blends
// interleave their words' halves. `offsets` (int16 per word, the same for both words' values)
// is subtracted from each product before it is split.
inline void scaled_planes(__m512i levels, __m512i even_scales, __m512i odd_scales, __m512i offsets,
                          uint8_t* low, uint8_t* high) {
  const __m512i even = _mm512_sub_epi16(_mm512_maddubs_epi16(levels, even_scales), offsets);
  const __m512i odd = _mm512_sub_epi16(_mm512_maddubs_epi16(levels, odd_scales), offsets);
  constexpr __mmask64 kOddBytes = 0xAAAAAAAAAAAAAAAAull;
  _mm512_store_si512(low, _mm512_mask_blend_epi8(kOddBytes, even, _mm512_slli_epi16(odd, 8)));
  _mm512_store_si512(high, _mm512_mask_blend_epi8(kOddBytes, _mm512_srli_epi16(even, 8), odd));
}

// Byte-permute indices spreading scale s(v) over the 64 values v of step P, in the even
// (kOdd false) or odd bytes, the other bytes taking index `zero` (a zero byte of the source):
// s(v) = byte kFirst + (v / kSpan) of the source.
template <int kFirst, int kSpan, bool kOdd, int kZero>
struct SpreadIndex {
  struct Bytes {
    alignas(64) int8_t value[64];
  };
  static constexpr Bytes make() {
    Bytes bytes{};
    for (int v = 0; v < 64; ++v)
      bytes.value[v] = static_cast<int8_t>((v % 2 == 1) == kOdd ? kFirst + v / kSpan : kZero);
    return bytes;
  }
  static constexpr Bytes kBytes = make();
};
template <int kFirst, int kSpan, bool kOdd, int kZero>
inline __m512i spread_index() {
  return _mm512_load_si512(SpreadIndex<kFirst, kSpan, kOdd, kZero>::kBytes.value);
}

struct Q8_0Tiles {
  static constexpr int64_t kValues = 32;
  static constexpr int kChains = 8;
  static constexpr int kPlanes = 1, kFactors = 1, kWeightBytes = 32;
  static constexpr bool kMinimums = false, kDirect = true;
  static constexpr int kSplitGroups = 0;
  static constexpr int64_t kTileMinTokens = 5;
  static void unpack(const uint8_t* row, int64_t blocks, int i, Panel& p) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * 34;
      std::memcpy(p.plane[0] + step_offset(b, i, 32), block + 2, 32);
      p.factor[0][b * kTileRows + i] = half(block);
    }
  }
  static void unpack_scales(const uint8_t* row, int64_t blocks, int i, Panel& p) {
    for (int64_t b = 0; b < blocks; ++b)
      p.factor[0][b * kTileRows + i] = half(row + b * 34);
  }
  template <int kTiles>
  static void block_sums(const Panel& p, int64_t b, const uint8_t* inputs0, const uint8_t* inputs1,
                         BlockSums& sums) {
    _tile_zero(4);
    if constexpr (kTiles == 2) _tile_zero(6);
    if (p.direct)
      _tile_loadd(0, p.direct + 34 * b, p.direct_stride);
    else
      _tile_loadd(0, p.plane[0] + b * kTileRows * 32, 32);
    _tile_loadd(2, inputs0 + 8 * b * 64, 64);
    _tile_dpbssd(4, 0, 2);
    _tile_stored(4, sums.plane[0][0], 64);
    if constexpr (kTiles == 2) {
      _tile_loadd(3, inputs1 + 8 * b * 64, 64);
      _tile_dpbssd(6, 0, 3);
      _tile_stored(6, sums.plane[1][0], 64);
    }
  }
  static void accumulate(const Panel& p, int64_t b, const BlockSums& sums, int i, __m512 scales,
                         const int32_t*, __m512 acc[16]) {
    for (int r = 0; r < kTileRows; ++r) {
      const __m512 factor = _mm512_mul_ps(scales, _mm512_set1_ps(p.factor[0][b * 16 + r]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums.plane[i][0] + 16 * r)),
                               factor, acc[r]);
    }
  }
};

// The two-plane types: four steps of 64 values per super-block, both input tiles per step.
template <bool kSignedHigh, int kTiles>
inline void super_block_sums(const Panel& p, int64_t b, const uint8_t* inputs0,
                             const uint8_t* inputs1, BlockSums& sums) {
  _tile_zero(4);
  _tile_zero(5);
  if constexpr (kTiles == 2) {
    _tile_zero(6);
    _tile_zero(7);
  }
  for (int s = 0; s < 4; ++s) {
    const size_t at = static_cast<size_t>((4 * b + s) * kTileRows * 64);
    const size_t row = static_cast<size_t>((64 * b + 16 * s) * 64);
    _tile_loadd(0, p.plane[0] + at, 64);
    _tile_loadd(1, p.plane[1] + at, 64);
    _tile_loadd(2, inputs0 + row, 64);
    _tile_dpbusd(4, 0, 2);
    if constexpr (kSignedHigh)
      _tile_dpbssd(5, 1, 2);
    else
      _tile_dpbusd(5, 1, 2);
    if constexpr (kTiles == 2) {
      _tile_loadd(3, inputs1 + row, 64);
      _tile_dpbusd(6, 0, 3);
      if constexpr (kSignedHigh)
        _tile_dpbssd(7, 1, 3);
      else
        _tile_dpbusd(7, 1, 3);
    }
  }
  _tile_stored(4, sums.plane[0][0], 64);
  _tile_stored(5, sums.plane[0][1], 64);
  if constexpr (kTiles == 2) {
    _tile_stored(6, sums.plane[1][0], 64);
    _tile_stored(7, sums.plane[1][1], 64);
  }
}

// The minimums as int16 pairs (m_2p, m_2p+1), and the block's two float factors.
inline void q4k_minimums_and_factors(const uint8_t* block, __m128i bytes, int64_t b, int i,
                                     Panel& p) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p.minimum_pairs + (b * kTileRows + i) * 4),
                   _mm_cvtepu8_epi16(_mm_srli_si128(bytes, 8)));
  p.factor[0][b * kTileRows + i] = half(block);
  p.factor[1][b * kTileRows + i] = -half(block + 2);
}

// Row r's super-block result from its scaled sum `scaled` (lane t: token t): the same two fmas
// per (row, token) on every q4_k path.
inline __m512 q4k_accumulate_row(const Panel& p, int64_t b, int r, __m512i scaled, __m512 scales,
                                 const __m512i pair_sums[4], __m512 acc) {
  const int32_t* m = p.minimum_pairs + (b * kTileRows + r) * 4;
  __m512i minimums =
      _mm512_dpwssd_epi32(_mm512_setzero_si512(), pair_sums[0], _mm512_set1_epi32(m[0]));
  minimums = _mm512_dpwssd_epi32(minimums, pair_sums[1], _mm512_set1_epi32(m[1]));
  minimums = _mm512_dpwssd_epi32(minimums, pair_sums[2], _mm512_set1_epi32(m[2]));
  minimums = _mm512_dpwssd_epi32(minimums, pair_sums[3], _mm512_set1_epi32(m[3]));
  const __m512 scale = _mm512_mul_ps(scales, _mm512_set1_ps(p.factor[0][b * 16 + r]));
  const __m512 min_scale = _mm512_mul_ps(scales, _mm512_set1_ps(p.factor[1][b * 16 + r]));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled), scale, acc);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(minimums), min_scale, acc);
}

struct Q4KTiles {
  static constexpr int64_t kValues = 256;
  static constexpr int kChains = 1;
  static constexpr int kPlanes = 2, kFactors = 2, kWeightBytes = 64;
  static constexpr bool kMinimums = true, kDirect = false;
  static constexpr int kSplitGroups = 0;
  static constexpr int64_t kTileMinTokens = 5;
  static void unpack(const uint8_t* row, int64_t blocks, int i, Panel& p) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * 144;
      const __m128i bytes = detail_wide::k4_scale_bytes(block + 4);
      const __m512i source = _mm512_zextsi128_si512(bytes);
      detail_quantized::unrolled(std::make_integer_sequence<int, 4>{}, [&](auto pair) {
        constexpr int P = decltype(pair)::value;
        const size_t at = step_offset(4 * b + P, i, 64);
        scaled_planes(detail_wide::Q4K::levels<P>(block),
                      _mm512_permutexvar_epi8(spread_index<2 * P, 32, false, 16>(), source),
                      _mm512_permutexvar_epi8(spread_index<2 * P, 32, true, 16>(), source),
                      _mm512_setzero_si512(), p.plane[0] + at, p.plane[1] + at);
      });
      q4k_minimums_and_factors(block, bytes, b, i, p);
    }
  }
  template <int kTiles>
  static void block_sums(const Panel& p, int64_t b, const uint8_t* inputs0, const uint8_t* inputs1,
                         BlockSums& sums) {
    super_block_sums<false, kTiles>(p, b, inputs0, inputs1, sums);
  }
  // pair_sums: this input tile's [pair][token] sums of this block.
  static void accumulate(const Panel& p, int64_t b, const BlockSums& sums, int i, __m512 scales,
                         const int32_t* pair_sums, __m512 acc[16]) {
    const __m512i pairs[4] = {_mm512_load_si512(pair_sums), _mm512_load_si512(pair_sums + 16),
                              _mm512_load_si512(pair_sums + 32), _mm512_load_si512(pair_sums + 48)};
    for (int r = 0; r < kTileRows; ++r)
      acc[r] = q4k_accumulate_row(p, b, r, two_plane_sum(sums, i, r), scales, pairs, acc[r]);
  }
};

// A split path's integer sum of one row: over a super-block's four steps, each step's sums times
// the scales `lanes` picks for its lanes from `scales`.
inline __m512i scaled_step_sums(const int32_t* const steps[4], const __m512i lanes[4],
                                __m512i scales) {
  __m512i total = _mm512_setzero_si512();
  for (int s = 0; s < 4; ++s) {
    total = _mm512_add_epi32(total, _mm512_mullo_epi32(_mm512_load_si512(steps[s]),
                                                       _mm512_permutexvar_epi32(lanes[s], scales)));
  }
  return total;
}

// q4_k for at most kSplitTokens tokens: the tiles multiply the unscaled levels (0..15, one plane)
// by inputs split into even and odd sub-blocks (pack_inputs' split_groups 2), so tile row r
// holds row r's sum of each sub-block for every token apart; the vector units scale and add
// them. The same exact integer sum_k sc_j q_k a_k as Q4KTiles' two planes, at a quarter of the
// unpacking work.
struct Q4KSplitTiles {
  static constexpr int64_t kValues = 256;
  static constexpr int kChains = 1;
  static constexpr int kPlanes = 1, kFactors = 2, kWeightBytes = 64;
  static constexpr bool kMinimums = true, kDirect = false;
  static constexpr int kSplitGroups = 2;  // the even and odd 32-value sub-blocks
  static void unpack(const uint8_t* row, int64_t blocks, int i, Panel& p) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * 144;
      const __m128i bytes = detail_wide::k4_scale_bytes(block + 4);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(p.sub_scales + (b * kTileRows + i) * 16), bytes);
      detail_quantized::unrolled(std::make_integer_sequence<int, 4>{}, [&](auto pair) {
        constexpr int P = decltype(pair)::value;
        _mm512_store_si512(p.plane[0] + step_offset(4 * b + P, i, 64),
                           detail_wide::Q4K::levels<P>(block));
      });
      q4k_minimums_and_factors(block, bytes, b, i, p);
    }
  }
  // One input tile: step s's sums into tile 4 + s, stored as sums.plane[s / 2][s % 2]. Weight
  // and input tiles alternate between steps so that a load need not wait for the multiply
  // before it.
  template <int kTiles>
  static void block_sums(const Panel& p, int64_t b, const uint8_t* inputs0, const uint8_t*,
                         BlockSums& sums) {
    static_assert(kTiles == 1);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    const uint8_t* weights = p.plane[0] + static_cast<size_t>(4 * b * kTileRows * 64);
    const uint8_t* inputs = inputs0 + static_cast<size_t>(64 * b * 64);
    _tile_loadd(0, weights, 64);
    _tile_loadd(2, inputs, 64);
    _tile_loadd(1, weights + kTileRows * 64, 64);
    _tile_loadd(3, inputs + 16 * 64, 64);
    _tile_dpbusd(4, 0, 2);
    _tile_dpbusd(5, 1, 3);
    _tile_loadd(0, weights + 2 * kTileRows * 64, 64);
    _tile_loadd(2, inputs + 32 * 64, 64);
    _tile_loadd(1, weights + 3 * kTileRows * 64, 64);
    _tile_loadd(3, inputs + 48 * 64, 64);
    _tile_dpbusd(6, 0, 2);
    _tile_dpbusd(7, 1, 3);
    _tile_stored(4, sums.plane[0][0], 64);
    _tile_stored(5, sums.plane[0][1], 64);
    _tile_stored(6, sums.plane[1][0], 64);
    _tile_stored(7, sums.plane[1][1], 64);
  }
  static void accumulate(const Panel& p, int64_t b, const BlockSums& sums, int, __m512 scales,
                         const int32_t* pair_sums, __m512 acc[16]) {
    const __m512i pairs[4] = {_mm512_load_si512(pair_sums), _mm512_load_si512(pair_sums + 16),
                              _mm512_load_si512(pair_sums + 32), _mm512_load_si512(pair_sums + 48)};
    // Lanes 0-7 of step s's sums are sub-block 2s, lanes 8-15 sub-block 2s + 1.
    const __m512i step_scales[4] = {
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
        _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
        _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6)};
    for (int r = 0; r < kTileRows; ++r) {
      const __m512i sub_scales = _mm512_cvtepu8_epi32(_mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(p.sub_scales + (b * kTileRows + r) * 16)));
      const int32_t* steps[4] = {sums.plane[0][0] + 16 * r, sums.plane[0][1] + 16 * r,
                                 sums.plane[1][0] + 16 * r, sums.plane[1][1] + 16 * r};
      __m512i scaled = scaled_step_sums(steps, step_scales, sub_scales);
      // Token t's even and odd sub-blocks together (lanes 8-15 then repeat 0-7, and their
      // input scales are zero).
      scaled = _mm512_add_epi32(scaled, _mm512_shuffle_i32x4(scaled, scaled, 0x4E));
      acc[r] = q4k_accumulate_row(p, b, r, scaled, scales, pairs, acc[r]);
    }
  }
};

struct Q6KTiles {
  static constexpr int64_t kValues = 256;
  static constexpr int kChains = 1;
  static constexpr int kPlanes = 2, kFactors = 1, kWeightBytes = 64;
  static constexpr bool kMinimums = false, kDirect = false;
  static constexpr int kSplitGroups = 0;
  static constexpr int64_t kTileMinTokens = 5;
  static void unpack(const uint8_t* row, int64_t blocks, int i, Panel& p) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * 210;
      // Bytes 0-15: the groups' signed scales; the rest zero.
      const __m512i source =
          _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192)));
      // 32 x scale per group as int16, for the levels' offset of 32.
      const __m512i offsets = _mm512_castsi256_si512(_mm256_slli_epi16(
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192))), 5));
      detail_quantized::unrolled(std::make_integer_sequence<int, 4>{}, [&](auto pair) {
        constexpr int P = decltype(pair)::value;
        const size_t at = step_offset(4 * b + P, i, 64);
        // Word k of a maddubs holds values 2k and 2k + 1, both in group 4P + k / 8.
        const __m512i word_groups = _mm512_set_epi16(
            4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3, 4 * P + 3,
            4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2,
            4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1, 4 * P + 1,
            4 * P, 4 * P, 4 * P, 4 * P, 4 * P, 4 * P, 4 * P, 4 * P);
        scaled_planes(detail_wide::Q6K::levels<P>(block),
                      _mm512_permutexvar_epi8(spread_index<4 * P, 16, false, 16>(), source),
                      _mm512_permutexvar_epi8(spread_index<4 * P, 16, true, 16>(), source),
                      _mm512_permutexvar_epi16(word_groups, offsets), p.plane[0] + at,
                      p.plane[1] + at);
      });
      p.factor[0][b * kTileRows + i] = half(block + 208);
    }
  }
  template <int kTiles>
  static void block_sums(const Panel& p, int64_t b, const uint8_t* inputs0, const uint8_t* inputs1,
                         BlockSums& sums) {
    super_block_sums<true, kTiles>(p, b, inputs0, inputs1, sums);
  }
  static void accumulate(const Panel& p, int64_t b, const BlockSums& sums, int i, __m512 scales,
                         const int32_t*, __m512 acc[16]) {
    for (int r = 0; r < kTileRows; ++r) {
      const __m512 scale = _mm512_mul_ps(scales, _mm512_set1_ps(p.factor[0][b * 16 + r]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(two_plane_sum(sums, i, r)), scale, acc[r]);
    }
  }
};

template <class T>
void unpack_panel(const QuantizedMatmulArgs& a, int64_t r0, int rows, int64_t blocks,
                  Panel& panel) {
  panel.direct = nullptr;
  if constexpr (T::kDirect) {
    if (rows == kTileRows) {
      panel.direct = a.weights + static_cast<size_t>(r0) * a.row_bytes + 2;
      panel.direct_stride = a.row_bytes;
      for (int i = 0; i < kTileRows; ++i)
        T::unpack_scales(a.weights + static_cast<size_t>(r0 + i) * a.row_bytes, blocks, i, panel);
      return;
    }
  }
  for (int i = 0; i < kTileRows; ++i) {
    if (i < rows) {
      T::unpack(a.weights + static_cast<size_t>(r0 + i) * a.row_bytes, blocks, i, panel);
      continue;
    }
    for (int p = 0; p < T::kPlanes; ++p)
      for (int64_t step = 0; step < a.columns / T::kWeightBytes; ++step)
        std::memset(panel.plane[p] + step_offset(step, i, T::kWeightBytes), 0, T::kWeightBytes);
    for (int f = 0; f < T::kFactors; ++f)
      for (int64_t b = 0; b < blocks; ++b)
        panel.factor[f][b * kTileRows + i] = 0;
    if constexpr (T::kMinimums)
      for (int64_t b = 0; b < blocks; ++b)
        std::memset(panel.minimum_pairs + (b * kTileRows + i) * 4, 0, 16);
    if constexpr (T::kSplitGroups > 0)
      for (int64_t b = 0; b < blocks; ++b)
        std::memset(panel.sub_scales + (b * kTileRows + i) * 16, 0, 16);
  }
}

// Row r's chains added in one fixed order: ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)).
template <int kChains>
inline __m512 sum_chains(const __m512 chains[kChains][16], int r) {
  if constexpr (kChains == 1) {
    return chains[0][r];
  } else {
    static_assert(kChains == 8);
    const __m512 low = _mm512_add_ps(_mm512_add_ps(chains[0][r], chains[1][r]),
                                     _mm512_add_ps(chains[2][r], chains[3][r]));
    const __m512 high = _mm512_add_ps(_mm512_add_ps(chains[4][r], chains[5][r]),
                                      _mm512_add_ps(chains[6][r], chains[7][r]));
    return _mm512_add_ps(low, high);
  }
}

template <class T, int kTiles>
void panel_product(const QuantizedMatmulArgs& a, const PackedInputs& inputs, const Panel& panel,
                   int64_t r0, int rows, int64_t tile, BlockSums sums[2]) {
  const int64_t blocks = inputs.blocks;
  constexpr int kChains = T::kChains;
  __m512 acc[2][kChains][16];
  for (auto& tile_acc : acc)
    for (auto& chain : tile_acc)
      for (auto& value : chain)
        value = _mm512_setzero_ps();
  const uint8_t* inputs0 = inputs.values + tile * inputs.tile_bytes;
  const uint8_t* inputs1 = inputs0 + inputs.tile_bytes;
  // The tiles multiply block b + 1 while the vector units scale block b's sums.
  T::template block_sums<kTiles>(panel, 0, inputs0, inputs1, sums[0]);
  for (int64_t b = 0; b < blocks; ++b) {
    if (b + 1 < blocks)
      T::template block_sums<kTiles>(panel, b + 1, inputs0, inputs1, sums[(b + 1) % 2]);
    for (int i = 0; i < kTiles; ++i) {
      const int64_t at = (tile + i) * blocks + b;
      T::accumulate(panel, b, sums[b % 2], i, _mm512_load_ps(inputs.scales + at * kTileRows),
                    inputs.pair_sums ? inputs.pair_sums + at * 4 * kTileRows : nullptr,
                    acc[i][b % kChains]);
    }
  }
  for (int i = 0; i < kTiles; ++i) {
    const int64_t first = (tile + i) * kTileRows;
    const int count = static_cast<int>(std::clamp<int64_t>(a.tokens - first, 0, kTileRows));
    // One vector per token holding its 16 rows: each token's results are one store.
    __m512i by_token[16];
    for (int r = 0; r < 16; ++r)
      by_token[r] = _mm512_castps_si512(sum_chains<kChains>(acc[i], r));
    transpose16(by_token);
    const auto row_mask = static_cast<__mmask16>((1u << rows) - 1);
    for (int t = 0; t < count; ++t)
      _mm512_mask_storeu_ps(a.y + (first + t) * a.y_stride + r0, row_mask,
                            _mm512_castsi512_ps(by_token[t]));
  }
}

template <class T>
void tile_matmul(const QuantizedMatmulArgs& a) {
  const int64_t blocks = a.columns / T::kValues;
  if (blocks == 0) {  // an empty sum (the loader refuses such matrices; tiles would read past)
    for (int64_t t = 0; t < a.tokens; ++t)
      for (int64_t r = a.row_begin; r < a.row_end; ++r)
        a.y[t * a.y_stride + r] = 0;
    return;
  }
  const PackedInputs inputs = pack_inputs(a, T::kValues, T::kMinimums, T::kSplitGroups);
  Panel panels[kPanelGroup];
  for (int slot = 0; slot < kPanelGroup; ++slot) {
    panels[slot] = panel_buffers(slot, a.columns, blocks, T::kPlanes, T::kFactors, T::kMinimums,
                                 T::kSplitGroups > 0);
  }
  configure_tiles(T::kWeightBytes);
  BlockSums sums[2];
  for (int64_t g0 = a.row_begin; g0 < a.row_end; g0 += kPanelGroup * kTileRows) {
    int count = 0, rows[kPanelGroup];
    for (; count < kPanelGroup && g0 + count * kTileRows < a.row_end; ++count) {
      const int64_t r0 = g0 + count * kTileRows;
      rows[count] = static_cast<int>(std::min<int64_t>(kTileRows, a.row_end - r0));
      unpack_panel<T>(a, r0, rows[count], blocks, panels[count]);
    }
    for (int64_t tile = 0; tile < inputs.tiles; tile += 2) {
      // The last pair may hold one tile of tokens and one of padding.
      const bool pair = (tile + 1) * kTileRows < a.tokens;
      for (int p = 0; p < count; ++p) {
        if constexpr (T::kSplitGroups == 0) {
          if (pair) {
            panel_product<T, 2>(a, inputs, panels[p], g0 + p * kTileRows, rows[p], tile, sums);
            continue;
          }
        }
        panel_product<T, 1>(a, inputs, panels[p], g0 + p * kTileRows, rows[p], tile, sums);
      }
    }
  }
  _tile_release();
}

// `Few`: the tiles for kTileMinTokens .. kSplitTokens tokens (T itself where no type has its own).
template <class T, class R, class Few = T>
void matmul(const QuantizedMatmulArgs& a) {
  static_assert(T::kTileMinTokens <= kTileMinTokens);
  if constexpr (Few::kSplitGroups > 0) {
    if (a.tokens >= kTileMinTokens && a.tokens <= kSplitTokens) return tile_matmul<Few>(a);
  }
  if (a.tokens >= T::kTileMinTokens) return tile_matmul<T>(a);
  switch (a.tokens) {
    case 0:
      return;
    case 1:
      return rows_for_tokens<R, 1>(a);
    case 2:
      return rows_for_tokens<R, 2>(a);
    case 3:
      return rows_for_tokens<R, 3>(a);
    case 4:
      return rows_for_tokens<R, 4>(a);
    default:
      return tile_matmul<T>(a);
  }
}

// Constant-initialised (indices as quantized_index gives them) so that no table built at start-up
// can read it before it is set.
constexpr QuantizedKernels make_table() {
  QuantizedKernels table{"amx-int8", {}};
  table.matmul[4] = &matmul<Q8_0Tiles, Q8_0Rows>;
  table.matmul[8] = &matmul<Q4KTiles, KRows<detail_wide::Q4K>, Q4KSplitTiles>;
  table.matmul[10] = &matmul<Q6KTiles, KRows<detail_wide::Q6K>>;
  return table;
}

}  // namespace
}  // namespace quantized_amx

const QuantizedKernels detail::kAmxQuantized = quantized_amx::make_table();

}  // namespace chatflow::kernels
