// The CUDA backend's kernels (transformer_kernels.h says what each computes). Weights are read
// through block_decode.h, whose decoders the host tests compare bit for bit with the CPU's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string>

#include "kernels/cuda/blas_library.h"
#include "kernels/cuda/block_decode.h"
#include "kernels/cuda/transformer_kernels.h"

namespace chatflow::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t items, int threads = kThreads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

cudaStream_t stream_of(DeviceContext& context) {
  return static_cast<cudaStream_t>(context.stream());
}

__device__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// ---------------------------------------------------------------------------------------------
// Products

// One warp per row: each lane decodes every 32nd value of the row once and multiplies it with
// that column of every token.
__global__ void matvec_kernel(TensorType type, const uint8_t* weights, size_t row_bytes,
                              int64_t rows, int64_t columns, const float* x, int tokens, float* y,
                              int64_t y_stride) {
  const int warps = blockDim.x / 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const uint8_t* stored = weights + static_cast<size_t>(row) * row_bytes;
  float sums[kMatVecTokens] = {};
  for (int64_t c = lane; c < columns; c += 32) {
    const float weight = decode_value(type, stored, c);
#pragma unroll
    for (int t = 0; t < kMatVecTokens; ++t) {
      if (t < tokens) sums[t] += weight * x[t * columns + c];
    }
  }
#pragma unroll
  for (int t = 0; t < kMatVecTokens; ++t) {
    if (t >= tokens) break;
    const float sum = warp_sum(sums[t]);
    if (lane == 0) y[t * y_stride + row] = sum;
  }
}

__global__ void dequantize_rows_kernel(TensorType type, const uint8_t* weights, size_t row_bytes,
                                       int64_t first_row, int64_t rows, int64_t columns,
                                       float* out) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * columns) return;
  const int64_t row = index / columns, column = index % columns;
  out[index] =
      decode_value(type, weights + static_cast<size_t>(first_row + row) * row_bytes, column);
}

void check_blas(cublasStatus_t status) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw DeviceError("cublasSgemm failed with status " + std::to_string(static_cast<int>(status)));
}

// ---------------------------------------------------------------------------------------------
// Element-wise and per-row work

__global__ void embed_kernel(TensorType type, const uint8_t* table, size_t row_bytes,
                             int64_t columns, const int32_t* ids, int64_t tokens, float scale,
                             float* out) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= tokens * columns) return;
  const int64_t t = index / columns, c = index % columns;
  out[index] = decode_value(type, table + static_cast<size_t>(ids[t]) * row_bytes, c) * scale;
}

__global__ void rms_norm_kernel(const float* x, const float* weight, float* out, int64_t width,
                                float epsilon) {
  __shared__ double partial[kThreads];
  const float* row = x + blockIdx.x * width;
  float* out_row = out + blockIdx.x * width;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    sum += static_cast<double>(row[i] * row[i]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float scale =
      1.0f / sqrtf(static_cast<float>(partial[0] / static_cast<double>(width)) + epsilon);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    out_row[i] = (row[i] * scale) * weight[i];
}

__global__ void gather_rows_kernel(const float* x, const int32_t* indices, int64_t count,
                                   int64_t width, float* out, bool scatter) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= count * width) return;
  const int64_t i = index / width, column = index % width;
  if (scatter) {
    out[indices[i] * width + column] = x[index];
  } else {
    out[index] = x[indices[i] * width + column];
  }
}

__global__ void rope_kernel(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                            const float* cosines, const float* sines, int64_t pairs,
                            bool adjacent_pairs) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= tokens * heads * pairs) return;
  const int64_t i = index % pairs, head = (index / pairs) % heads, t = index / (pairs * heads);
  float* row = x + (t * heads + head) * head_dim;
  const int64_t a = adjacent_pairs ? 2 * i : i;
  const int64_t b = adjacent_pairs ? 2 * i + 1 : i + pairs;
  const float c = cosines[t * pairs + i], s = sines[t * pairs + i];
  const float x0 = row[a], x1 = row[b];
  row[a] = x0 * c - x1 * s;
  row[b] = x0 * s + x1 * c;
}

__global__ void add_bias_kernel(float* rows, const float* bias, int64_t width, int64_t count) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < width * count) rows[index] += bias[index % width];
}

__global__ void add_kernel(float* y, const float* x, int64_t count) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < count) y[index] += x[index];
}

__global__ void gated_activation_kernel(bool gelu, const float* gate, const float* up, float* out,
                                        int64_t count) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= count) return;
  const float g = gate[index];
  float activated;
  if (gelu) {
    const float inner = 0.7978845608028654f * (0.044715f * g * g * g + g);
    const float tanh = 1.0f - 2.0f / (expf(2.0f * inner) + 1.0f);
    activated = 0.5f * g * (1.0f + tanh);
  } else {
    activated = g / (1.0f + expf(-g));
  }
  out[index] = activated * up[index];
}

__global__ void soft_cap_kernel(float* x, int64_t count, float cap) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < count) x[index] = cap * tanhf(x[index] / cap);
}

// ---------------------------------------------------------------------------------------------
// The KV pool and attention

__device__ float to_float(float value) {
  return value;
}
__device__ float to_float(__half value) {
  return __half2float(value);
}
__device__ void store_as(float& slot, float value) {
  slot = value;
}
__device__ void store_as(__half& slot, float value) {
  slot = __float2half_rn(value);
}

template <typename Kv>
__global__ void store_kv_kernel(KvLayout layout, Kv* pool, StepPositions where, int64_t tokens,
                                int64_t layer, const float* keys, const float* values) {
  const int64_t kv_dim = layout.kv_heads * layout.head_dim;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= tokens * kv_dim) return;
  const int64_t t = index / kv_dim, g = (index % kv_dim) / layout.head_dim,
                d = index % layout.head_dim;
  Kv* key = pool + static_cast<size_t>(where.blocks[t]) * layout.block_elements() +
            layout.key_offset(layer, g) + static_cast<size_t>(where.slots[t]) * layout.head_dim + d;
  store_as(*key, keys[index]);
  store_as(key[layout.block_tokens * layout.head_dim], values[index]);
}

constexpr int kAttentionWarps = 4;
constexpr int kValuesPerLane = static_cast<int>(kMaxHeadDim / 32);

// One thread block per (token, query head). Each warp takes every fourth position and keeps a
// running softmax (largest score, sum of weights, weighted values); the warps' partial results
// are combined at the end.
template <typename Kv>
__global__ void attention_kernel(KvLayout layout, const Kv* pool, StepPositions where,
                                 int64_t layer, int64_t heads, float scale, float softcap,
                                 const float* queries, float* out) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int head_dim = static_cast<int>(layout.head_dim);
  const int64_t group = heads / layout.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* query = queries + (t * heads + h) * head_dim;
  float q[kValuesPerLane], sums[kValuesPerLane];
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) {
    const int d = lane + 32 * i;
    q[i] = d < head_dim ? query[d] : 0.0f;
    sums[i] = 0;
  }
  float largest = -INFINITY, total = 0;
  const int32_t* table = where.tables + where.table_start[t];
  const int positions = where.positions[t];
  const size_t head_offset = layout.key_offset(layer, h / group);
  const int64_t block_tokens = layout.block_tokens;
  const int64_t value_offset = block_tokens * head_dim;
  for (int p = where.first_position[t] + warp; p < positions; p += kAttentionWarps) {
    const Kv* key = pool + static_cast<size_t>(table[p / block_tokens]) * layout.block_elements() +
                    head_offset + static_cast<size_t>(p % block_tokens) * head_dim;
    float dot = 0;
#pragma unroll
    for (int i = 0; i < kValuesPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) dot += q[i] * to_float(key[d]);
    }
    float score = warp_sum(dot) * scale;
    if (softcap > 0) score = softcap * tanhf(score / softcap);
    const float new_largest = fmaxf(largest, score);
    const float shrink = expf(largest - new_largest);
    const float weight = expf(score - new_largest);
    total = total * shrink + weight;
#pragma unroll
    for (int i = 0; i < kValuesPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) sums[i] = sums[i] * shrink + weight * to_float(key[value_offset + d]);
    }
    largest = new_largest;
  }
  __shared__ float warp_largest[kAttentionWarps], warp_total[kAttentionWarps];
  __shared__ float warp_sums[kAttentionWarps][kMaxHeadDim];
  if (lane == 0) {
    warp_largest[warp] = largest;
    warp_total[warp] = total;
  }
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < head_dim) warp_sums[warp][d] = sums[i];
  }
  __syncthreads();
  float overall = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w)
    overall = fmaxf(overall, warp_largest[w]);
  float* result = out + (t * heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float weights = 0, value = 0;
    for (int w = 0; w < kAttentionWarps; ++w) {
      if (warp_largest[w] == -INFINITY) continue;  // a warp that saw no position
      const float factor = expf(warp_largest[w] - overall);
      weights += warp_total[w] * factor;
      value += warp_sums[w][d] * factor;
    }
    result[d] = value / weights;
  }
}

__global__ void combine_experts_kernel(const float* expert_rows, const float* weights, int64_t used,
                                       int64_t dim, const float* shared, const float* shared_gate,
                                       const float* normed, float* out) {
  __shared__ float partial[kThreads];
  const int64_t t = blockIdx.x;
  float gate = 0;
  if (shared != nullptr) {
    float sum = 0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
      sum += shared_gate[i] * normed[t * dim + i];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    gate = 1.0f / (1.0f + expf(-partial[0]));
  }
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float value = 0;
    for (int64_t k = 0; k < used; ++k) {
      const float term = expert_rows[(t * used + k) * dim + i] * weights[t * used + k];
      value = k == 0 ? term : value + term;
    }
    if (shared != nullptr) value += shared[t * dim + i] * gate;
    out[t * dim + i] = value;
  }
}

// ---------------------------------------------------------------------------------------------
// Greedy draws

// The block's most likely token (highest logit, lower id on ties) among those not in
// `excluded[0..excluded_count)` and above -infinity when `finite_only`; -1 when there is none.
// Every thread returns it.
__device__ int32_t block_best(const float* row, int64_t vocabulary, const int32_t* excluded,
                              int excluded_count, bool finite_only) {
  __shared__ float best_logit[kThreads];
  __shared__ int32_t best_id[kThreads];
  float logit = -INFINITY;
  int32_t id = -1;
  for (int64_t i = threadIdx.x; i < vocabulary; i += blockDim.x) {
    const float value = row[i];
    if (finite_only && value == -INFINITY) continue;
    bool skip = false;
    for (int e = 0; e < excluded_count; ++e)
      skip = skip || excluded[e] == i;
    if (skip) continue;
    if (id < 0 || value > logit) {  // ids rise within a thread: ties keep the lower
      logit = value;
      id = static_cast<int32_t>(i);
    }
  }
  best_logit[threadIdx.x] = logit;
  best_id[threadIdx.x] = id;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      const int other = threadIdx.x + half;
      const bool better =
          best_id[other] >= 0 &&
          (best_id[threadIdx.x] < 0 || best_logit[other] > best_logit[threadIdx.x] ||
           (best_logit[other] == best_logit[threadIdx.x] && best_id[other] < best_id[threadIdx.x]));
      if (better) {
        best_logit[threadIdx.x] = best_logit[other];
        best_id[threadIdx.x] = best_id[other];
      }
    }
    __syncthreads();
  }
  const int32_t best = best_id[0];
  __syncthreads();  // the shared arrays are reused by the next call
  return best;
}

__global__ void draw_greedy_kernel(float* logits, int64_t vocabulary, const GreedyDraw* draws,
                                   const uint64_t* masks, const int32_t* penalty_tokens,
                                   const int32_t* penalty_counts, float* penalty_raw,
                                   DrawnToken* out) {
  const GreedyDraw draw = draws[blockIdx.x];
  float* row = logits + static_cast<int64_t>(draw.row) * vocabulary;
  DrawnToken& drawn = out[blockIdx.x];
  if (draw.mask_offset >= 0) {
    const uint64_t* mask = masks + draw.mask_offset;
    for (int64_t i = threadIdx.x; i < vocabulary; i += blockDim.x) {
      const int64_t word = i / 64;
      if (word >= draw.mask_words || ((mask[word] >> (i % 64)) & 1) == 0) row[i] = -INFINITY;
    }
    __syncthreads();
  }
  __shared__ double partial[kThreads];
  __shared__ int32_t chosen[kMaxTopLogprobs];
  float largest = 0;
  double log_sum = 0;
  if (draw.want_logprobs || draw.top_logprobs > 0) {
    const int32_t best = block_best(row, vocabulary, nullptr, 0, false);
    largest = row[best];
    double sum = 0;
    for (int64_t i = threadIdx.x; i < vocabulary; i += blockDim.x)
      sum += exp(static_cast<double>(row[i] - largest));
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    log_sum = log(partial[0]);
    int found = 0;
    for (; found < draw.top_logprobs && found < kMaxTopLogprobs; ++found) {
      const int32_t next = block_best(row, vocabulary, chosen, found, true);
      if (next < 0) break;
      if (threadIdx.x == 0) {
        chosen[found] = next;
        drawn.top_tokens[found] = next;
        drawn.top_logprobs[found] = static_cast<float>(row[next] - largest - log_sum);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) drawn.top_count = found;
  }
  // Penalties: each pair's token is distinct, so the pairs never write the same logit.
  for (int32_t j = threadIdx.x; j < draw.penalty_count; j += blockDim.x) {
    const int32_t token = penalty_tokens[draw.penalty_offset + j];
    if (token < 0 || token >= vocabulary) continue;
    float logit = row[token];
    penalty_raw[draw.penalty_offset + j] = logit;
    if (draw.repetition_penalty != 1.0f)
      logit = logit > 0 ? logit / draw.repetition_penalty : logit * draw.repetition_penalty;
    row[token] = logit - (static_cast<float>(penalty_counts[draw.penalty_offset + j]) *
                              draw.frequency_penalty +
                          draw.presence_penalty);
  }
  __syncthreads();
  const int32_t token = block_best(row, vocabulary, nullptr, 0, false);
  if (threadIdx.x == 0) {
    drawn.token = token;
    float raw = row[token];
    for (int32_t j = 0; j < draw.penalty_count; ++j) {
      if (penalty_tokens[draw.penalty_offset + j] == token)
        raw = penalty_raw[draw.penalty_offset + j];
    }
    drawn.logprob = draw.want_logprobs ? static_cast<float>(raw - largest - log_sum) : 0.0f;
  }
}

}  // namespace

void draw_greedy(DeviceContext& context, float* logits, int64_t vocabulary, const GreedyDraw* draws,
                 int64_t count, const uint64_t* masks, const int32_t* penalty_tokens,
                 const int32_t* penalty_counts, float* penalty_raw, DrawnToken* out) {
  if (count == 0) return;
  draw_greedy_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream_of(context)>>>(
      logits, vocabulary, draws, masks, penalty_tokens, penalty_counts, penalty_raw, out);
  context.check_launch("draw_greedy_kernel");
}

bool decodes_on_device(TensorType type) {
  return decoded_block_values(type) != 0;
}

void multiply(DeviceContext& context, const DeviceMatrix& weights, const float* x, int64_t tokens,
              float* y, int64_t y_stride, float* tile, size_t tile_floats) {
  if (tokens <= 0 || weights.rows == 0) return;
  if (tokens <= kMatVecTokens) {
    constexpr int kWarpsPerBlock = 8;
    matvec_kernel<<<blocks_for(weights.rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0,
                    stream_of(context)>>>(weights.type, weights.data, weights.row_bytes,
                                          weights.rows, weights.columns, x,
                                          static_cast<int>(tokens), y, y_stride);
    context.check_launch("matvec_kernel");
    return;
  }
  auto blas = static_cast<cublasHandle_t>(context.blas());
  const float one = 1.0f, zero = 0.0f;
  const bool in_place = weights.type == TensorType::f32;
  // Bands of whole rows, none of more than 2^31 - 1 values (cuBLAS takes int sizes).
  const int64_t most_rows = std::max<int64_t>(1, INT32_MAX / weights.columns);
  const int64_t tile_rows =
      std::max<int64_t>(1, static_cast<int64_t>(tile_floats) / weights.columns);
  const int64_t band_rows =
      std::min({most_rows, weights.rows, in_place ? weights.rows : tile_rows});
  for (int64_t first = 0; first < weights.rows; first += band_rows) {
    const int64_t band = std::min(band_rows, weights.rows - first);
    const float* a = reinterpret_cast<const float*>(weights.data + first * weights.row_bytes);
    int64_t lda = static_cast<int64_t>(weights.row_bytes / sizeof(float));
    if (!in_place) {
      dequantize_rows_kernel<<<blocks_for(band * weights.columns), kThreads, 0,
                               stream_of(context)>>>(weights.type, weights.data, weights.row_bytes,
                                                     first, band, weights.columns, tile);
      context.check_launch("dequantize_rows_kernel");
      a = tile;
      lda = weights.columns;
    }
    // Row-major y[t][r] is column-major y^T: y^T = W (as column-major W^T, transposed) times x^T.
    check_blas(blas_library().sgemm(
        blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(band), static_cast<int>(tokens),
        static_cast<int>(weights.columns), &one, a, static_cast<int>(lda), x,
        static_cast<int>(weights.columns), &zero, y + first, static_cast<int>(y_stride)));
  }
}

void embed_tokens(DeviceContext& context, const DeviceMatrix& table, const int32_t* ids,
                  int64_t tokens, float scale, float* out) {
  embed_kernel<<<blocks_for(tokens * table.columns), kThreads, 0, stream_of(context)>>>(
      table.type, table.data, table.row_bytes, table.columns, ids, tokens, scale, out);
  context.check_launch("embed_kernel");
}

void rms_norm_rows(DeviceContext& context, const float* x, const float* weight, float* out,
                   int64_t rows, int64_t width, float epsilon) {
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream_of(context)>>>(x, weight, out,
                                                                                    width, epsilon);
  context.check_launch("rms_norm_kernel");
}

void gather_rows(DeviceContext& context, const float* x, const int32_t* indices, int64_t count,
                 int64_t width, float* out) {
  if (count == 0) return;
  gather_rows_kernel<<<blocks_for(count * width), kThreads, 0, stream_of(context)>>>(
      x, indices, count, width, out, false);
  context.check_launch("gather_rows_kernel");
}

void scatter_rows(DeviceContext& context, const float* x, const int32_t* indices, int64_t count,
                  int64_t width, float* out) {
  if (count == 0) return;
  gather_rows_kernel<<<blocks_for(count * width), kThreads, 0, stream_of(context)>>>(
      x, indices, count, width, out, true);
  context.check_launch("scatter_rows_kernel");
}

void rope_rows(DeviceContext& context, float* x, int64_t tokens, int64_t heads, int64_t head_dim,
               const float* cosines, const float* sines, int64_t pairs, bool adjacent_pairs) {
  if (tokens * heads * pairs == 0) return;
  rope_kernel<<<blocks_for(tokens * heads * pairs), kThreads, 0, stream_of(context)>>>(
      x, tokens, heads, head_dim, cosines, sines, pairs, adjacent_pairs);
  context.check_launch("rope_kernel");
}

void add_bias_rows(DeviceContext& context, float* rows, const float* bias, int64_t width,
                   int64_t count) {
  add_bias_kernel<<<blocks_for(width * count), kThreads, 0, stream_of(context)>>>(rows, bias, width,
                                                                                  count);
  context.check_launch("add_bias_kernel");
}

void add(DeviceContext& context, float* y, const float* x, int64_t count) {
  add_kernel<<<blocks_for(count), kThreads, 0, stream_of(context)>>>(y, x, count);
  context.check_launch("add_kernel");
}

void gated_activation(DeviceContext& context, bool gelu, const float* gate, const float* up,
                      float* out, int64_t count) {
  gated_activation_kernel<<<blocks_for(count), kThreads, 0, stream_of(context)>>>(gelu, gate, up,
                                                                                  out, count);
  context.check_launch("gated_activation_kernel");
}

void soft_cap(DeviceContext& context, float* x, int64_t count, float cap) {
  soft_cap_kernel<<<blocks_for(count), kThreads, 0, stream_of(context)>>>(x, count, cap);
  context.check_launch("soft_cap_kernel");
}

void store_keys_and_values(DeviceContext& context, const KvLayout& layout, void* pool,
                           const StepPositions& where, int64_t tokens, int64_t layer,
                           const float* keys, const float* values) {
  const int64_t items = tokens * layout.kv_heads * layout.head_dim;
  if (items == 0) return;
  if (layout.type == KvType::f16) {
    store_kv_kernel<<<blocks_for(items), kThreads, 0, stream_of(context)>>>(
        layout, static_cast<__half*>(pool), where, tokens, layer, keys, values);
  } else {
    store_kv_kernel<<<blocks_for(items), kThreads, 0, stream_of(context)>>>(
        layout, static_cast<float*>(pool), where, tokens, layer, keys, values);
  }
  context.check_launch("store_kv_kernel");
}

void attention(DeviceContext& context, const KvLayout& layout, const void* pool,
               const StepPositions& where, int64_t tokens, int64_t layer, int64_t heads,
               float scale, float softcap, const float* queries, float* out) {
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(heads));
  if (layout.type == KvType::f16) {
    attention_kernel<<<grid, kAttentionWarps * 32, 0, stream_of(context)>>>(
        layout, static_cast<const __half*>(pool), where, layer, heads, scale, softcap, queries,
        out);
  } else {
    attention_kernel<<<grid, kAttentionWarps * 32, 0, stream_of(context)>>>(
        layout, static_cast<const float*>(pool), where, layer, heads, scale, softcap, queries, out);
  }
  context.check_launch("attention_kernel");
}

void combine_experts(DeviceContext& context, const float* expert_rows, const float* weights,
                     int64_t tokens, int64_t used, int64_t dim, const float* shared,
                     const float* shared_gate, const float* normed, float* out) {
  if (tokens == 0) return;
  combine_experts_kernel<<<static_cast<unsigned>(tokens), kThreads, 0, stream_of(context)>>>(
      expert_rows, weights, used, dim, shared, shared_gate, normed, out);
  context.check_launch("combine_experts_kernel");
}

}  // namespace chatflow::kernels::cuda
