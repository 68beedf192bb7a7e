// The kernel bodies, written once over a SIMD "traits" type S and compiled once per instruction
// set. Include this inside a namespace of its own in each instruction-set file: the inline
// functions here are compiled with different target flags and must not be merged by the linker.
//
// S provides: V (a vector of S::kWidth floats), zero, set1, load, load_partial, store,
// store_partial, fma, mul, add, sub, max, reduce_sum, reduce_max, exp, load_f16(_partial),
// load_bf16(_partial), load_q8 (kWidth int8), load_q4 (kWidth nibbles, low or high), f16 (one
// scalar half to float).

// Loaders: kWidth weights of row `row` starting at column k, as floats.
template <class S>
struct LoadF32 {
  static constexpr bool kHasTail = true;
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
  static typename S::V at(const uint8_t* row, int64_t k) {
    return S::load_bf16(reinterpret_cast<const uint16_t*>(row) + k);
  }
  static typename S::V tail(const uint8_t* row, int64_t k, int n) {
    return S::load_bf16_partial(reinterpret_cast<const uint16_t*>(row) + k, n);
  }
};

// Quantised rows are whole blocks of 32, so they never have a tail.
template <class S>
struct LoadQ8 {
  static constexpr bool kHasTail = false;
  static typename S::V at(const uint8_t* row, int64_t k) {
    const uint8_t* block = row + (k / kQuantBlock) * kQ8BlockBytes;
    uint16_t scale;
    std::memcpy(&scale, block, 2);
    return S::mul(S::load_q8(reinterpret_cast<const int8_t*>(block + 2 + k % kQuantBlock)),
                  S::set1(S::f16(scale)));
  }
  static typename S::V tail(const uint8_t*, int64_t, int) { return S::zero(); }
};

template <class S>
struct LoadQ4 {
  static constexpr bool kHasTail = false;
  static typename S::V at(const uint8_t* row, int64_t k) {
    const uint8_t* block = row + (k / kQuantBlock) * kQ4BlockBytes;
    uint16_t scale;
    std::memcpy(&scale, block, 2);
    int64_t index = k % kQuantBlock;  // values 0..15 are low nibbles, 16..31 high nibbles
    return S::mul(S::load_q4(block + 2 + index % 16, index >= 16), S::set1(S::f16(scale)));
  }
  static typename S::V tail(const uint8_t*, int64_t, int) { return S::zero(); }
};

// R rows by T tokens. Each (row, token) pair has its own accumulator, stepping through the
// columns in the same order, so the result never depends on R, T or the caller's tiling.
template <class S, class Load, int R, int T>
inline void matmul_tile(const uint8_t* weights, size_t row_bytes, int64_t columns, const float* x,
                        int64_t x_stride, float* y, int64_t y_stride) {
  using V = typename S::V;
  V accumulators[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      accumulators[r][t] = S::zero();
  }
  int64_t k = 0;
  for (; k + S::kWidth <= columns; k += S::kWidth) {
    V inputs[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      inputs[t] = S::load(x + t * x_stride + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      V weight = Load::at(weights + r * row_bytes, k);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        accumulators[r][t] = S::fma(weight, inputs[t], accumulators[r][t]);
    }
  }
  if constexpr (Load::kHasTail) {
    if (k < columns) {
      int remaining = static_cast<int>(columns - k);
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
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
      y[t * y_stride + r] = S::reduce_sum(accumulators[r][t]);
  }
}

// Rows [row_begin, row_end) against up to four tokens.
template <class S, class Load, int T>
inline void matmul_rows(const uint8_t* weights, size_t row_bytes, int64_t columns,
                        int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                        float* y, int64_t y_stride) {
  constexpr int kRows = T == 1 ? 8 : 4;
  int64_t r = row_begin;
  for (; r + kRows <= row_end; r += kRows) {
    matmul_tile<S, Load, kRows, T>(weights + r * row_bytes, row_bytes, columns, x, x_stride, y + r,
                                   y_stride);
  }
  for (; r < row_end; ++r) {
    matmul_tile<S, Load, 1, T>(weights + r * row_bytes, row_bytes, columns, x, x_stride, y + r,
                               y_stride);
  }
}

template <class S, class Load>
inline void matmul_tokens(const uint8_t* weights, size_t row_bytes, int64_t columns,
                          int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                          int64_t tokens, float* y, int64_t y_stride) {
  for (int64_t t = 0; t < tokens; t += 4) {
    const float* x_tile = x + t * x_stride;
    float* y_tile = y + t * y_stride;
    switch (std::min<int64_t>(4, tokens - t)) {
      case 1:
        matmul_rows<S, Load, 1>(weights, row_bytes, columns, row_begin, row_end, x_tile, x_stride,
                                y_tile, y_stride);
        break;
      case 2:
        matmul_rows<S, Load, 2>(weights, row_bytes, columns, row_begin, row_end, x_tile, x_stride,
                                y_tile, y_stride);
        break;
      case 3:
        matmul_rows<S, Load, 3>(weights, row_bytes, columns, row_begin, row_end, x_tile, x_stride,
                                y_tile, y_stride);
        break;
      default:
        matmul_rows<S, Load, 4>(weights, row_bytes, columns, row_begin, row_end, x_tile, x_stride,
                                y_tile, y_stride);
        break;
    }
  }
}

template <class S, class Load>
void matmul(const MatmulArgs& args) {
  if constexpr (std::is_same_v<Load, LoadF32<S>>) {
    matmul_tokens<S, Load>(args.weights, args.row_bytes, args.columns, args.row_begin, args.row_end,
                           args.x, args.x_stride, args.tokens, args.y, args.y_stride);
  } else {
    if (args.tokens <= 4 || args.scratch == nullptr) {
      matmul_tokens<S, Load>(args.weights, args.row_bytes, args.columns, args.row_begin,
                             args.row_end, args.x, args.x_stride, args.tokens, args.y,
                             args.y_stride);
      return;
    }
    // Many tokens: turn four rows into floats once, then reuse them for every token. The
    // floats are exactly what the loader yields, so results equal the direct path bit for bit.
    const int64_t columns = args.columns;
    for (int64_t r0 = args.row_begin; r0 < args.row_end; r0 += 4) {
      int64_t rows = std::min<int64_t>(4, args.row_end - r0);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = args.weights + (r0 + r) * args.row_bytes;
        float* out = args.scratch + r * columns;
        int64_t k = 0;
        for (; k + S::kWidth <= columns; k += S::kWidth)
          S::store(out + k, Load::at(row, k));
        if (k < columns)
          S::store_partial(out + k, Load::tail(row, k, static_cast<int>(columns - k)),
                           static_cast<int>(columns - k));
      }
      const auto* dequantised = reinterpret_cast<const uint8_t*>(args.scratch);
      matmul_tokens<S, LoadF32<S>>(dequantised, static_cast<size_t>(columns) * 4, columns, 0, rows,
                                   args.x, args.x_stride, args.tokens, args.y + r0, args.y_stride);
    }
  }
}

template <class S>
void attention(const AttentionArgs& args) {
  using V = typename S::V;
  const int64_t block_tokens = args.block_tokens;
  const int64_t head_dim = args.head_dim;
  const int64_t blocks = (args.positions + block_tokens - 1) / block_tokens;
  const int64_t padded = blocks * block_tokens;
  // Scores: keys are stored [head_dim][block_tokens], so a vector of scores for consecutive
  // positions builds up from one broadcast query value per dimension.
  for (int64_t b = 0; b < blocks; ++b) {
    const float* keys =
        args.pool + static_cast<size_t>(args.block_table[b]) * args.block_stride + args.key_offset;
    int64_t count = std::min(block_tokens, args.positions - b * block_tokens);
    for (int64_t h = 0; h < args.group_size; ++h) {
      const float* query = args.queries + h * head_dim;
      float* scores = args.scores + h * padded + b * block_tokens;
      for (int64_t j = 0; j < count; j += S::kWidth) {
        V accumulator = S::zero();
        for (int64_t d = 0; d < head_dim; ++d) {
          accumulator =
              S::fma(S::set1(query[d]), S::load(keys + d * block_tokens + j), accumulator);
        }
        S::store(scores + j, S::mul(accumulator, S::set1(args.scale)));
      }
    }
  }
  for (int64_t h = 0; h < args.group_size; ++h) {
    float* scores = args.scores + h * padded;
    const int64_t n = args.positions;
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
    float normaliser = 1.0f / S::reduce_sum(sum);
    float* out = args.out + h * head_dim;
    for (int64_t d = 0; d < head_dim; ++d)
      out[d] = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      const float* values = args.pool +
                            static_cast<size_t>(args.block_table[b]) * args.block_stride +
                            args.value_offset;
      int64_t count = std::min(block_tokens, n - b * block_tokens);
      for (int64_t t = 0; t < count; ++t) {
        V weight = S::set1(scores[b * block_tokens + t]);
        const float* value = values + t * head_dim;
        int64_t d = 0;
        for (; d + S::kWidth <= head_dim; d += S::kWidth)
          S::store(out + d, S::fma(weight, S::load(value + d), S::load(out + d)));
        if (d < head_dim) {
          int remaining = static_cast<int>(head_dim - d);
          S::store_partial(out + d,
                           S::fma(weight, S::load_partial(value + d, remaining),
                                  S::load_partial(out + d, remaining)),
                           remaining);
        }
      }
    }
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

template <class S>
constexpr CpuKernelTable make_table(std::string_view name) {
  return CpuKernelTable{name,
                        {&matmul<S, LoadF32<S>>, &matmul<S, LoadF16<S>>, &matmul<S, LoadBf16<S>>,
                         &matmul<S, LoadQ8<S>>, &matmul<S, LoadQ4<S>>},
                        &attention<S>,
                        &silu_multiply<S>};
}
