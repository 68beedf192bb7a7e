// The kernel bodies, written once over a SIMD "traits" type S and compiled once per instruction
// set. Include this inside a namespace of its own in each instruction-set file: the inline
// functions here are compiled with different target flags and must not be merged by the linker.
//
// S provides: V (a vector of S::kWidth floats), zero, set1, load, load_partial, store,
// store_partial, fma, mul, add, sub, max, reduce_sum, reduce_max, exp, load_f16(_partial),
// load_bf16(_partial), load_i8 (kWidth signed bytes as floats), f16 (one scalar half to float),
// to_f16 (one float to half, rounding to nearest even).

// Loaders: kWidth weights of row `row` starting at column k, as floats.
template <class S>
struct LoadF32 {
  static constexpr bool kHasTail = true;
  static constexpr int64_t kBytes = 4;
  static typename S::V at(const uint8_t* row, int64_t k) {
    return S::load(reinterpret_cast<const float*>(row) + k);
  }
  static typename S::V tail(const uint8_t* row, int64_t k, int n) {
    return S::load_partial(reinterpret_cast<const float*>(row) + k, n);
  }
};

template <class S>
struct LoadF16 {
  static constexpr bool kHasTail = true;
  static constexpr int64_t kBytes = 2;
  static typename S::V at(const uint8_t* row, int64_t k) {
    return S::load_f16(reinterpret_cast<const uint16_t*>(row) + k);
  }
  static typename S::V tail(const uint8_t* row, int64_t k, int n) {
    return S::load_f16_partial(reinterpret_cast<const uint16_t*>(row) + k, n);
  }
};

template <class S>
struct LoadBf16 {
  static constexpr bool kHasTail = true;
  static constexpr int64_t kBytes = 2;
  static typename S::V at(const uint8_t* row, int64_t k) {
    return S::load_bf16(reinterpret_cast<const uint16_t*>(row) + k);
  }
  static typename S::V tail(const uint8_t* row, int64_t k, int n) {
    return S::load_bf16_partial(reinterpret_cast<const uint16_t*>(row) + k, n);
  }
};

// The canonical arithmetic of one (row, token) dot product, which every tiling below keeps:
// S::kWidth lanes, lane i accumulating columns k = i (mod kWidth) in increasing k with fused
// multiply-adds, then S::reduce_sum. Results therefore never depend on how many tokens or which
// rows share a call.
template <class S, class Load, int R, int T>
struct Tile {
  using V = typename S::V;
  V accumulators[R][T];

  void zero() {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        accumulators[r][t] = S::zero();
    }
  }
  // Columns [begin, end): begin is a multiple of kWidth; only the last range may have a tail.
  void accumulate(const uint8_t* weights, size_t row_bytes, int64_t begin, int64_t end,
                  const float* x, int64_t x_stride) {
    int64_t k = begin;
    for (; k + S::kWidth <= end; k += S::kWidth) {
      V inputs[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        inputs[t] = S::load(x + t * x_stride + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        V weight = Load::at(weights + r * row_bytes, k);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          accumulators[r][t] = S::fma(weight, inputs[t], accumulators[r][t]);
      }
    }
    if constexpr (Load::kHasTail) {
      if (k < end) {
        int remaining = static_cast<int>(end - k);
        V inputs[T];
        for (int t = 0; t < T; ++t)
          inputs[t] = S::load_partial(x + t * x_stride + k, remaining);
        for (int r = 0; r < R; ++r) {
          V weight = Load::tail(weights + r * row_bytes, k, remaining);
          for (int t = 0; t < T; ++t)
            accumulators[r][t] = S::fma(weight, inputs[t], accumulators[r][t]);
        }
      }
    }
  }
  void save(float* out) const {
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t)
        S::store(out + (r * T + t) * S::kWidth, accumulators[r][t]);
    }
  }
  void restore(const float* in) {
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t)
        accumulators[r][t] = S::load(in + (r * T + t) * S::kWidth);
    }
  }
  void reduce(float* y, int64_t y_stride) const {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        y[t * y_stride + r] = S::reduce_sum(accumulators[r][t]);
    }
  }
};

// Few tokens (decoding): stream each row once, all columns in one go.
template <class S, class Load, int T>
inline void matmul_few_tokens(const MatmulArgs& args, const float* x, float* y) {
  constexpr int kRows = T == 1 ? 8 : 4;
  auto one = [&]<int R>(int64_t row) {
    Tile<S, Load, R, T> tile;
    tile.zero();
    tile.accumulate(args.weights + row * args.row_bytes, args.row_bytes, 0, args.columns, x,
                    args.x_stride);
    tile.reduce(y + row, args.y_stride);
  };
  int64_t r = args.row_begin;
  for (; r + kRows <= args.row_end; r += kRows)
    one.template operator()<kRows>(r);
  for (; r < args.row_end; ++r)
    one.template operator()<1>(r);
}

// Columns per block when many tokens share the weights: a block of four rows and the tokens'
// inputs for it stay in the first-level cache while every token tile passes over them.
inline constexpr int64_t kColumnBlock = 1024;

// Many tokens (prefill, batched decoding): six rows at a time, column block by column block,
// every four-token tile of the batch in turn; partial accumulators wait in scratch between blocks.
template <class S, class Load>
inline void matmul_many_tokens(const MatmulArgs& args) {
  constexpr int kRows = kManyTokenRows;  // six rows by four tokens: 24 accumulators, measured best
  constexpr int kTokens = kManyTokenTile;
  constexpr int64_t kTileFloats = kRows * kTokens * S::kWidth;
  const int64_t tiles = (args.tokens + kTokens - 1) / kTokens;
  auto rows = [&]<int R>(int64_t row) {
    const uint8_t* weights = args.weights + row * args.row_bytes;
    for (int64_t begin = 0; begin < args.columns; begin += kColumnBlock) {
      int64_t end = std::min(args.columns, begin + kColumnBlock);
      bool first = begin == 0;
      bool last = end == args.columns;
      for (int64_t tile_index = 0; tile_index < tiles; ++tile_index) {
        int64_t t0 = tile_index * kTokens;
        const float* x = args.x + t0 * args.x_stride;
        float* saved = args.scratch + tile_index * kTileFloats;
        auto run = [&]<int T>() {
          Tile<S, Load, R, T> tile;
          if (first) {
            tile.zero();
          } else {
            tile.restore(saved);
          }
          tile.accumulate(weights, args.row_bytes, begin, end, x, args.x_stride);
          if (last) {
            tile.reduce(args.y + t0 * args.y_stride + row, args.y_stride);
          } else {
            tile.save(saved);
          }
        };
        static_assert(kTokens == 4);
        switch (std::min<int64_t>(kTokens, args.tokens - t0)) {
          case 1:
            run.template operator()<1>();
            break;
          case 2:
            run.template operator()<2>();
            break;
          case 3:
            run.template operator()<3>();
            break;
          default:
            run.template operator()<4>();
            break;
        }
      }
    }
  };
  int64_t r = args.row_begin;
  for (; r + kRows <= args.row_end; r += kRows)
    rows.template operator()<kRows>(r);
  for (; r < args.row_end; ++r)
    rows.template operator()<1>(r);
}

template <class S, class Load>
void matmul(const MatmulArgs& args) {
  if (args.tokens > 4 && args.scratch != nullptr) {
    matmul_many_tokens<S, Load>(args);
    return;
  }
  for (int64_t t = 0; t < args.tokens; t += 4) {
    const float* x = args.x + t * args.x_stride;
    float* y = args.y + t * args.y_stride;
    switch (std::min<int64_t>(4, args.tokens - t)) {
      case 1:
        matmul_few_tokens<S, Load, 1>(args, x, y);
        break;
      case 2:
        matmul_few_tokens<S, Load, 2>(args, x, y);
        break;
      case 3:
        matmul_few_tokens<S, Load, 3>(args, x, y);
        break;
      default:
        matmul_few_tokens<S, Load, 4>(args, x, y);
        break;
    }
  }
}

// Keys and values as the KV cache stores them.
template <class S>
struct KvF32 {
  using Element = float;
  static typename S::V load(const float* p) { return S::load(p); }
  static typename S::V load_partial(const float* p, int n) { return S::load_partial(p, n); }
};

template <class S>
struct KvF16 {
  using Element = uint16_t;
  static typename S::V load(const uint16_t* p) { return S::load_f16(p); }
  static typename S::V load_partial(const uint16_t* p, int n) { return S::load_f16_partial(p, n); }
};

// The elements at `offset` bytes into block `b` of the sequence's block table.
template <class Element>
inline const Element* kv_at(const AttentionArgs& args, int64_t b, size_t offset) {
  return reinterpret_cast<const Element*>(static_cast<const uint8_t*>(args.pool) +
                                          static_cast<size_t>(args.block_table[b]) *
                                              args.block_stride +
                                          offset);
}

// How far ahead of its use a panel is prefetched: the hardware prefetchers alone leave the
// many-token kernel waiting on memory for a third of its time (measured on a 2-core EPYC).
inline constexpr int64_t kPrefetchBytes = 4096;

// T tokens times one panel: T x (kPanelRows / kWidth) accumulators stay in registers over all
// columns; each column's weights are loaded (and converted) once for the T tokens. `upcoming`, if
// not null, is the panel to fetch into the second-level cache meanwhile, so that only the first
// tile of a call waits for memory.
template <class S, class Load, int T>
inline void packed_tile(const uint8_t* panel, const uint8_t* upcoming, int64_t columns,
                        const float* x, int64_t x_stride, float* y, int64_t y_stride,
                        int64_t height) {
  using V = typename S::V;
  constexpr int kVectors = static_cast<int>(kPanelRows / S::kWidth);
  constexpr int64_t kColumnBytes = kPanelRows * Load::kBytes;
  V accumulators[T][kVectors];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v)
      accumulators[t][v] = S::zero();
  }
  for (int64_t k = 0; k < columns; ++k) {
    const uint8_t* column = panel + k * kColumnBytes;
    for (int64_t line = 0; line < kColumnBytes; line += 64) {
      __builtin_prefetch(column + kPrefetchBytes + line);
      if (upcoming != nullptr) __builtin_prefetch(upcoming + k * kColumnBytes + line, 0, 2);
    }
    V weights[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v)
      weights[v] = Load::at(column, v * S::kWidth);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      V input = S::set1(x[t * x_stride + k]);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v)
        accumulators[t][v] = S::fma(weights[v], input, accumulators[t][v]);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int v = 0; v < kVectors; ++v) {
      int64_t row = v * S::kWidth;
      if (row + S::kWidth <= height) {
        S::store(y + t * y_stride + row, accumulators[t][v]);
      } else if (row < height) {
        S::store_partial(y + t * y_stride + row, accumulators[t][v],
                         static_cast<int>(height - row));
      }
    }
  }
}

// The last tile of a panel: `tokens` (< T) tokens, with the tile made for exactly that many.
template <class S, class Load, int T>
inline void packed_tile_of(int64_t tokens, const uint8_t* panel, const uint8_t* upcoming,
                           int64_t columns, const float* x, int64_t x_stride, float* y,
                           int64_t y_stride, int64_t height) {
  if constexpr (T > 1) {
    if (tokens < T) {
      packed_tile_of<S, Load, T - 1>(tokens, panel, upcoming, columns, x, x_stride, y, y_stride,
                                     height);
      return;
    }
  }
  packed_tile<S, Load, T>(panel, upcoming, columns, x, x_stride, y, y_stride, height);
}

template <class S, class Load>
void packed_matmul(const PackedMatmulArgs& args) {
  constexpr int kTokens = S::kPackedTokens;
  const int64_t panel_bytes = kPanelRows * args.columns * Load::kBytes;
  for (int64_t panel = args.panel_begin; panel < args.panel_end; ++panel) {
    const uint8_t* weights = args.panels + panel * panel_bytes;
    const int64_t height = std::min(kPanelRows, args.rows - panel * kPanelRows);
    float* y = args.y + panel * kPanelRows;
    const uint8_t* upcoming = panel + 1 < args.panel_end ? weights + panel_bytes : nullptr;
    int64_t t = 0;
    for (; t + kTokens <= args.tokens; t += kTokens) {
      packed_tile<S, Load, kTokens>(weights, t == 0 ? upcoming : nullptr, args.columns,
                                    args.x + t * args.x_stride, args.x_stride,
                                    y + t * args.y_stride, args.y_stride, height);
    }
    if (t < args.tokens) {
      packed_tile_of<S, Load, kTokens - 1>(args.tokens - t, weights, t == 0 ? upcoming : nullptr,
                                           args.columns, args.x + t * args.x_stride, args.x_stride,
                                           y + t * args.y_stride, args.y_stride, height);
    }
  }
}

// out[0..vectors*kWidth) (+ a partial tail of `tail` values) += sum over positions of weight *
// value row, with the output in registers. Two sets of accumulators take alternate positions
// (independent chains for the FMA units); they are added at the end.
template <class S, class Kv, int kVectors>
inline void weighted_sum_of_values(const AttentionArgs& args, const float* weights,
                                   int64_t first_block, int64_t d0, int tail, float* out) {
  using V = typename S::V;
  const int64_t block_tokens = args.block_tokens;
  const int64_t head_dim = args.head_dim;
  V even[kVectors];
  V odd[kVectors];
  for (int v = 0; v < kVectors; ++v)
    even[v] = odd[v] = S::zero();
  using Element = typename Kv::Element;
  auto load = [&](const Element* p, int v) {
    return tail > 0 && v == kVectors - 1 ? Kv::load_partial(p + v * S::kWidth, tail)
                                         : Kv::load(p + v * S::kWidth);
  };
  const int64_t blocks = (args.positions + block_tokens - 1) / block_tokens;
  for (int64_t b = first_block; b < blocks; ++b) {
    const Element* values = kv_at<Element>(args, b, args.value_offset) + d0;
    const float* block_weights = weights + b * block_tokens;
    int64_t count = std::min(block_tokens, args.positions - b * block_tokens);
    int64_t t = 0;
    for (; t + 2 <= count; t += 2) {
      V w0 = S::set1(block_weights[t]);
      V w1 = S::set1(block_weights[t + 1]);
      const Element* row0 = values + t * head_dim;
      const Element* row1 = row0 + head_dim;
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) {
        even[v] = S::fma(w0, load(row0, v), even[v]);
        odd[v] = S::fma(w1, load(row1, v), odd[v]);
      }
    }
    if (t < count) {
      V w0 = S::set1(block_weights[t]);
      for (int v = 0; v < kVectors; ++v)
        even[v] = S::fma(w0, load(values + t * head_dim, v), even[v]);
    }
  }
  for (int v = 0; v < kVectors; ++v) {
    V sum = S::add(even[v], odd[v]);
    if (tail > 0 && v == kVectors - 1) {
      S::store_partial(out + v * S::kWidth, sum, tail);
    } else {
      S::store(out + v * S::kWidth, sum);
    }
  }
}

// One block's scores for one query head: keys are stored [head_dim][block_tokens], so a vector
// of scores for consecutive positions builds up from one broadcast query value per dimension;
// four accumulators over the dimensions keep the FMA units busy.
template <class S, class Kv>
inline void block_scores(const typename Kv::Element* keys, const float* query, int64_t head_dim,
                         int64_t block_tokens, int64_t count, float scale, float* scores) {
  using V = typename S::V;
  for (int64_t j = 0; j < count; j += S::kWidth) {
    V a0 = S::zero(), a1 = S::zero(), a2 = S::zero(), a3 = S::zero();
    int64_t d = 0;
    for (; d + 4 <= head_dim; d += 4) {
      a0 = S::fma(S::set1(query[d]), Kv::load(keys + d * block_tokens + j), a0);
      a1 = S::fma(S::set1(query[d + 1]), Kv::load(keys + (d + 1) * block_tokens + j), a1);
      a2 = S::fma(S::set1(query[d + 2]), Kv::load(keys + (d + 2) * block_tokens + j), a2);
      a3 = S::fma(S::set1(query[d + 3]), Kv::load(keys + (d + 3) * block_tokens + j), a3);
    }
    for (; d < head_dim; ++d)
      a0 = S::fma(S::set1(query[d]), Kv::load(keys + d * block_tokens + j), a0);
    S::store(scores + j, S::mul(S::add(S::add(a0, a1), S::add(a2, a3)), S::set1(scale)));
  }
}

// Blocks sit anywhere in the pool, beyond what the hardware prefetchers guess: ask for the next
// block's keys (none after the last block) and this block's values while this block's scores are
// computed.
template <class Element>
inline void prefetch_block(const Element* next_keys, const Element* values, size_t block_elements) {
  for (size_t line = 0; line < block_elements; line += 64 / sizeof(Element)) {
    if (next_keys != nullptr) __builtin_prefetch(next_keys + line);
    __builtin_prefetch(values + line);
  }
}

// The score pass: the scaled query-key dot products of every head in the group at every
// position, into args.scores (one row of `padded` scores per head).
template <class S, class Kv>
inline void attention_scores(const AttentionArgs& args, int64_t first_block, int64_t blocks,
                             int64_t padded) {
  using Element = typename Kv::Element;
  const int64_t block_tokens = args.block_tokens;
  const int64_t head_dim = args.head_dim;
  for (int64_t b = first_block; b < blocks; ++b) {
    const Element* keys = kv_at<Element>(args, b, args.key_offset);
    int64_t count = std::min(block_tokens, args.positions - b * block_tokens);
    const size_t block_elements = static_cast<size_t>(head_dim * block_tokens);
    const Element* values = kv_at<Element>(args, b, args.value_offset);
    const Element* next_keys =
        b + 1 < blocks ? kv_at<Element>(args, b + 1, args.key_offset) : nullptr;
    prefetch_block(next_keys, values, block_elements);
    for (int64_t h = 0; h < args.group_size; ++h) {
      block_scores<S, Kv>(keys, args.queries + h * head_dim, head_dim, block_tokens, count,
                          args.scale, args.scores + h * padded + b * block_tokens);
    }
  }
}

// Replaces scores[0..n) by exp(score - the largest score) and returns 1 / their sum, which the
// caller applies once to the weighted sum rather than to every weight.
template <class S>
inline float exponentiate_scores(float* scores, int64_t n) {
  using V = typename S::V;
  V maximum = S::set1(-3.0e38f);
  int64_t j = 0;
  for (; j + S::kWidth <= n; j += S::kWidth)
    maximum = S::max(maximum, S::load(scores + j));
  float largest = S::reduce_max(maximum);
  for (; j < n; ++j)
    largest = std::max(largest, scores[j]);
  V sum = S::zero();
  V largest_vector = S::set1(largest);
  for (j = 0; j + S::kWidth <= n; j += S::kWidth) {
    V weight = S::exp(S::sub(S::load(scores + j), largest_vector));
    S::store(scores + j, weight);
    sum = S::add(sum, weight);
  }
  if (j < n) {
    int remaining = static_cast<int>(n - j);
    V weight = S::exp(S::sub(S::load_partial(scores + j, remaining), largest_vector));
    S::store_partial(scores + j, weight, remaining);
    sum = S::add(sum, S::load_partial(scores + j, remaining));
  }
  return 1.0f / S::reduce_sum(sum);
}

// One head's scores become its unnormalised attention weights: soft-capped, exponentiated from
// the window's first position, zero before it within its block. Returns 1 / their sum.
template <class S>
inline float attention_weights(const AttentionArgs& args, float* scores) {
  const int64_t first = args.first_position;
  if (args.softcap > 0) {
    const float cap = args.softcap;
    for (int64_t j = first; j < args.positions; ++j)
      scores[j] = cap * std::tanh(scores[j] / cap);
  }
  float normaliser = exponentiate_scores<S>(scores + first, args.positions - first);
  for (int64_t j = first / args.block_tokens * args.block_tokens; j < first; ++j)
    scores[j] = 0;
  return normaliser;
}

// out[0..head_dim) = the values weighted by `weights`, up to four vectors of the head at a time
// in registers.
template <class S, class Kv>
inline void weighted_sum_of_head(const AttentionArgs& args, const float* weights,
                                 int64_t first_block, float* out) {
  const int64_t head_dim = args.head_dim;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 4 * S::kWidth) {
    int64_t width = std::min<int64_t>(4 * S::kWidth, head_dim - d0);
    int vectors = static_cast<int>((width + S::kWidth - 1) / S::kWidth);
    int tail = static_cast<int>(width % S::kWidth);
    switch (vectors) {
      case 1:
        weighted_sum_of_values<S, Kv, 1>(args, weights, first_block, d0, tail, out + d0);
        break;
      case 2:
        weighted_sum_of_values<S, Kv, 2>(args, weights, first_block, d0, tail, out + d0);
        break;
      case 3:
        weighted_sum_of_values<S, Kv, 3>(args, weights, first_block, d0, tail, out + d0);
        break;
      default:
        weighted_sum_of_values<S, Kv, 4>(args, weights, first_block, d0, tail, out + d0);
        break;
    }
  }
}

template <class S, class Kv>
void attention(const AttentionArgs& args) {
  const int64_t block_tokens = args.block_tokens;
  const int64_t head_dim = args.head_dim;
  const int64_t blocks = (args.positions + block_tokens - 1) / block_tokens;
  const int64_t padded = blocks * block_tokens;
  // Blocks wholly before a sliding window are never read.
  const int64_t first = args.first_position;
  const int64_t first_block = first / block_tokens;
  attention_scores<S, Kv>(args, first_block, blocks, padded);
  // The softmax and weighted-sum pass, one head at a time.
  for (int64_t h = 0; h < args.group_size; ++h) {
    float* scores = args.scores + h * padded;
    float normaliser = attention_weights<S>(args, scores);
    float* out = args.out + h * head_dim;
    weighted_sum_of_head<S, Kv>(args, scores, first_block, out);
    for (int64_t d = 0; d < head_dim; ++d)
      out[d] *= normaliser;
  }
}

template <class S>
void silu_multiply(const float* gate, const float* up, float* out, int64_t count) {
  using V = typename S::V;
  const V one = S::set1(1.0f);
  int64_t i = 0;
  for (; i + S::kWidth <= count; i += S::kWidth) {
    V g = S::load(gate + i);
    V sigmoid_denominator = S::add(one, S::exp(S::sub(S::zero(), g)));
    S::store(out + i, S::div(S::mul(g, S::load(up + i)), sigmoid_denominator));
  }
  if (i < count) {
    int remaining = static_cast<int>(count - i);
    V g = S::load_partial(gate + i, remaining);
    V sigmoid_denominator = S::add(one, S::exp(S::sub(S::zero(), g)));
    S::store_partial(out + i,
                     S::div(S::mul(g, S::load_partial(up + i, remaining)), sigmoid_denominator),
                     remaining);
  }
}

// GELU's tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with tanh(u) written as
// 1 - 2 / (exp(2u) + 1), which saturates correctly at both ends.
template <class S>
void gelu_multiply(const float* gate, const float* up, float* out, int64_t count) {
  using V = typename S::V;
  const V one = S::set1(1.0f), two = S::set1(2.0f), half = S::set1(0.5f);
  const V root = S::set1(0.7978845608028654f), cubic = S::set1(0.044715f);
  auto gelu = [&](V x) {
    V inner = S::mul(root, S::fma(S::mul(cubic, x), S::mul(x, x), x));
    V tanh = S::sub(one, S::div(two, S::add(S::exp(S::mul(two, inner)), one)));
    return S::mul(S::mul(half, x), S::add(one, tanh));
  };
  int64_t i = 0;
  for (; i + S::kWidth <= count; i += S::kWidth)
    S::store(out + i, S::mul(gelu(S::load(gate + i)), S::load(up + i)));
  if (i < count) {
    int remaining = static_cast<int>(count - i);
    S::store_partial(
        out + i,
        S::mul(gelu(S::load_partial(gate + i, remaining)), S::load_partial(up + i, remaining)),
        remaining);
  }
}

template <class S>
void rms_norm(const float* x, const float* weight, float* out, int64_t count, float epsilon) {
  // The sum of squares in double, in index order, as the reference does: the scale is the same
  // on every instruction set.
  double sum = 0;
  for (int64_t i = 0; i < count; ++i)
    sum += static_cast<double>(x[i] * x[i]);
  const float scale =
      1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(count)) + epsilon);
  const typename S::V scale_vector = S::set1(scale);
  int64_t i = 0;
  for (; i + S::kWidth <= count; i += S::kWidth)
    S::store(out + i, S::mul(S::mul(S::load(x + i), scale_vector), S::load(weight + i)));
  for (; i < count; ++i)
    out[i] = (x[i] * scale) * weight[i];
}

template <class S>
void rope(float* head, const float* cosines, const float* sines, int64_t pairs,
          bool adjacent_pairs) {
  for (int64_t i = 0; i < pairs; ++i) {
    int64_t a = adjacent_pairs ? 2 * i : i;
    int64_t b = adjacent_pairs ? 2 * i + 1 : i + pairs;
    float x0 = head[a];
    float x1 = head[b];
    head[a] = x0 * cosines[i] - x1 * sines[i];
    head[b] = x0 * sines[i] + x1 * cosines[i];
  }
}

template <class S>
void add(float* y, const float* x, int64_t count) {
  int64_t i = 0;
  for (; i + S::kWidth <= count; i += S::kWidth)
    S::store(y + i, S::add(S::load(y + i), S::load(x + i)));
  for (; i < count; ++i)
    y[i] += x[i];
}

template <class S>
void add_bias(float* rows, const float* bias, int64_t width, int64_t row_count) {
  for (int64_t t = 0; t < row_count; ++t)
    add<S>(rows + t * width, bias, width);
}

template <class S>
void store_kv_f32(const float* values, void* out, int64_t count, int64_t out_stride) {
  auto* pool = static_cast<float*>(out);
  for (int64_t i = 0; i < count; ++i)
    pool[i * out_stride] = values[i];
}

template <class S>
void store_kv_f16(const float* values, void* out, int64_t count, int64_t out_stride) {
  auto* pool = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < count; ++i)
    pool[i * out_stride] = S::to_f16(values[i]);
}

#include "kernels/cpu/attention_q8_0_impl.h"

template <class S>
constexpr CpuKernelTable make_table(std::string_view name) {
  return CpuKernelTable{name,
                     {&matmul<S, LoadF32<S>>, &matmul<S, LoadF16<S>>, &matmul<S, LoadBf16<S>>},
                     {&packed_matmul<S, LoadF32<S>>, &packed_matmul<S, LoadF16<S>>,
                      &packed_matmul<S, LoadBf16<S>>},
                     {&attention<S, KvF32<S>>, &attention<S, KvF16<S>>, &attention_q8_0<S>},
                     &silu_multiply<S>,
                     &gelu_multiply<S>,
                     &rms_norm<S>,
                     &rope<S>,
                     &add<S>,
                     &add_bias<S>,
                     {&store_kv_f32<S>, &store_kv_f16<S>, &store_kv_q8_0<S>},
                     &kernels::dequantize_row,
                     {},
                     {},
                     {}};
}
