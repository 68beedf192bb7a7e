// Attention over a q8_0 KV cache and the stores that fill it, written once over the SIMD traits
// S of kernels_impl.h (included from there, inside each instruction set's namespace).
//
// Keys and values are rows of head_dim / 32 blocks per position (kv_type.h): an f16 scale d and
// 32 signed bytes q, value = d * q. Nothing is dequantised ahead: the score pass turns 32 bytes
// of a key into floats times d once and multiplies them with every query head of the group; the
// weighted sum multiplies each value block's bytes by (attention weight * d). A position's 34-byte
// blocks are half the bytes of its f16 row: the same work reads half the memory.

inline constexpr int64_t kQ8Values = 32;

template <class S>
inline float q8_scale(const uint8_t* block) {
  uint16_t half;
  std::memcpy(&half, block, 2);
  return S::f16(half);
}

template <class S>
inline const int8_t* q8_values(const uint8_t* block) {
  return reinterpret_cast<const int8_t*>(block + 2);
}

// Scores of `heads` query heads (H of them, registers for each) against `count` key rows, into
// scores[h * padded + j]. Each (head, position) sum: lanes accumulate the products of query
// values with (d * q) of the key over the row's blocks in order, then S::reduce_sum, times scale.
template <class S, int H>
inline void q8_scores_of_heads(const uint8_t* keys, size_t row_bytes, const float* queries,
                               int64_t head_dim, int64_t count, float scale, float* scores,
                               int64_t padded) {
  using V = typename S::V;
  constexpr int kVectors = static_cast<int>(kQ8Values / S::kWidth);
  const int64_t row_blocks = head_dim / kQ8Values;
  for (int64_t j = 0; j < count; ++j) {
    const uint8_t* row = keys + static_cast<size_t>(j) * row_bytes;
    V sums[H];
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h)
      sums[h] = S::zero();
    for (int64_t b = 0; b < row_blocks; ++b) {
      const uint8_t* block = row + static_cast<size_t>(b) * kKvQ8Bytes;
      const V d = S::set1(q8_scale<S>(block));
      const int8_t* q = q8_values<S>(block);
      const float* query = queries + b * kQ8Values;
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
        const V key = S::mul(S::load_i8(q + v * S::kWidth), d);
#pragma GCC unroll 8
        for (int h = 0; h < H; ++h)
          sums[h] = S::fma(S::load(query + h * head_dim + v * S::kWidth), key, sums[h]);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h)
      scores[h * padded + j] = S::reduce_sum(sums[h]) * scale;
  }
}

// One block of positions' scores for every head of the group, up to eight heads per pass over
// the keys.
template <class S>
inline void q8_block_scores(const AttentionArgs& args, const uint8_t* keys, size_t row_bytes,
                            int64_t count, int64_t padded, float* scores) {
  for (int64_t h0 = 0; h0 < args.group_size; h0 += 8) {
    const float* queries = args.queries + h0 * args.head_dim;
    float* out = scores + h0 * padded;
    auto run = [&]<int H>() {
      q8_scores_of_heads<S, H>(keys, row_bytes, queries, args.head_dim, count, args.scale, out,
                               padded);
    };
    switch (std::min<int64_t>(8, args.group_size - h0)) {
      case 1:
        run.template operator()<1>();
        break;
      case 2:
        run.template operator()<2>();
        break;
      case 3:
        run.template operator()<3>();
        break;
      case 4:
        run.template operator()<4>();
        break;
      case 5:
        run.template operator()<5>();
        break;
      case 6:
        run.template operator()<6>();
        break;
      case 7:
        run.template operator()<7>();
        break;
      default:
        run.template operator()<8>();
        break;
    }
  }
}

// out[d0, d0 + kBlocks * 32) = sum over positions of weight * value, kBlocks q8 blocks of the
// row starting at block `first_row_block`. Two sets of accumulators take alternate positions
// (independent chains for the FMA units), added at the end.
template <class S, int kBlocks>
inline void q8_weighted_sum_of_values(const AttentionArgs& args, size_t row_bytes,
                                      const float* weights, int64_t first_block,
                                      int64_t first_row_block, float* out) {
  using V = typename S::V;
  constexpr int kPerBlock = static_cast<int>(kQ8Values / S::kWidth);
  V even[kBlocks][kPerBlock];
  V odd[kBlocks][kPerBlock];
  for (int k = 0; k < kBlocks; ++k) {
    for (int v = 0; v < kPerBlock; ++v)
      even[k][v] = odd[k][v] = S::zero();
  }
  auto accumulate = [&](V(&sums)[kBlocks][kPerBlock], const uint8_t* row, float weight) {
#pragma GCC unroll 4
    for (int k = 0; k < kBlocks; ++k) {
      const uint8_t* block = row + static_cast<size_t>(first_row_block + k) * kKvQ8Bytes;
      const V factor = S::set1(weight * q8_scale<S>(block));
      const int8_t* q = q8_values<S>(block);
#pragma GCC unroll 4
      for (int v = 0; v < kPerBlock; ++v)
        sums[k][v] = S::fma(factor, S::load_i8(q + v * S::kWidth), sums[k][v]);
    }
  };
  const int64_t block_tokens = args.block_tokens;
  const int64_t blocks = (args.positions + block_tokens - 1) / block_tokens;
  for (int64_t b = first_block; b < blocks; ++b) {
    const uint8_t* values = kv_at<uint8_t>(args, b, args.value_offset);
    const float* block_weights = weights + b * block_tokens;
    const int64_t count = std::min(block_tokens, args.positions - b * block_tokens);
    int64_t t = 0;
    for (; t + 2 <= count; t += 2) {
      accumulate(even, values + static_cast<size_t>(t) * row_bytes, block_weights[t]);
      accumulate(odd, values + static_cast<size_t>(t + 1) * row_bytes, block_weights[t + 1]);
    }
    if (t < count) accumulate(even, values + static_cast<size_t>(t) * row_bytes, block_weights[t]);
  }
  for (int k = 0; k < kBlocks; ++k) {
    for (int v = 0; v < kPerBlock; ++v)
      S::store(out + k * kQ8Values + v * S::kWidth, S::add(even[k][v], odd[k][v]));
  }
}

template <class S>
void attention_q8_0(const AttentionArgs& args) {
  const int64_t block_tokens = args.block_tokens;
  const int64_t head_dim = args.head_dim;
  const int64_t blocks = (args.positions + block_tokens - 1) / block_tokens;
  const int64_t padded = blocks * block_tokens;
  const size_t row_bytes = kv_row_bytes(KvType::q8_0, head_dim);
  const size_t region = row_bytes * static_cast<size_t>(block_tokens);
  // Blocks wholly before a sliding window are never read.
  const int64_t first_block = args.first_position / block_tokens;
  for (int64_t b = first_block; b < blocks; ++b) {
    const uint8_t* keys = kv_at<uint8_t>(args, b, args.key_offset);
    const uint8_t* next_keys =
        b + 1 < blocks ? kv_at<uint8_t>(args, b + 1, args.key_offset) : nullptr;
    prefetch_block(next_keys, kv_at<uint8_t>(args, b, args.value_offset), region);
    q8_block_scores<S>(args, keys, row_bytes,
                       std::min(block_tokens, args.positions - b * block_tokens), padded,
                       args.scores + b * block_tokens);
  }
  // Up to four vectors' worth of a head's row (whole q8 blocks) in registers per pass.
  constexpr int64_t kChunkBlocks = std::max<int64_t>(1, 4 * S::kWidth / kQ8Values);
  const int64_t row_blocks = head_dim / kQ8Values;
  for (int64_t h = 0; h < args.group_size; ++h) {
    float* scores = args.scores + h * padded;
    const float normaliser = attention_weights<S>(args, scores);
    float* out = args.out + h * head_dim;
    int64_t k = 0;
    for (; k + kChunkBlocks <= row_blocks; k += kChunkBlocks)
      q8_weighted_sum_of_values<S, kChunkBlocks>(args, row_bytes, scores, first_block, k,
                                                 out + k * kQ8Values);
    for (; k < row_blocks; ++k)
      q8_weighted_sum_of_values<S, 1>(args, row_bytes, scores, first_block, k, out + k * kQ8Values);
    for (int64_t d = 0; d < head_dim; ++d)
      out[d] *= normaliser;
  }
}

// llama.cpp's quantize_row_q8_0_ref: d = max |x| / 127, q = round(x / d) (halves away from
// zero), d stored as f16; the same bytes on every instruction set.
template <class S>
void store_kv_q8_0(const float* values, void* out, int64_t count, int64_t /*out_stride*/) {
  auto* blocks = static_cast<uint8_t*>(out);
  for (int64_t b = 0; b < count / kQ8Values; ++b) {
    const float* x = values + b * kQ8Values;
    uint8_t* block = blocks + static_cast<size_t>(b) * kKvQ8Bytes;
    float largest = 0;
    for (int64_t i = 0; i < kQ8Values; ++i)
      largest = std::max(largest, std::fabs(x[i]));
    const float d = largest / 127.0f;
    const float inverse = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t half = S::to_f16(d);
    std::memcpy(block, &half, 2);
    auto* q = reinterpret_cast<int8_t*>(block + 2);
    for (int64_t i = 0; i < kQ8Values; ++i)
      q[i] = static_cast<int8_t>(std::round(x[i] * inverse));
  }
}
