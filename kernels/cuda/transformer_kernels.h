// The CUDA backend's kernels as host functions over device buffers, callable from plain C++ (no
// CUDA header here). Each launches on the context's stream and returns at once; a launch that
// cannot start throws DeviceError. Rows are row-major and contiguous unless a stride is given.
// Every function states what it computes in the terms of the CPU kernel table
// (kernels/cpu/cpu_kernel_table.h), which the conformance suite compares it with.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_runtime.h"
#include "kernels/host_device.h"
#include "kernels/kv_type.h"
#include "kernels/tensor_type.h"

namespace chatflow::kernels::cuda {

// A weight matrix in device memory, stored as its file stores it: `rows` rows of `columns`
// values, `row_bytes` apart.
struct DeviceMatrix {
  TensorType type = TensorType::f32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t columns = 0;
  size_t row_bytes = 0;
};

// Whether the device kernels read `type` in place (block_decode.h decodes it); the backend
// dequantises the others to f32 at load.
bool decodes_on_device(TensorType type);

// Up to this many tokens a product runs as fused dequantise-and-multiply mat-vec (each weight
// read once for all of them); more go through cuBLAS over dequantised tiles.
inline constexpr int64_t kMatVecTokens = 8;

// y[t * y_stride + r] = sum_c W[r][c] * x[t * columns + c] for t < tokens, r < rows.
// `tile` is device scratch for tokens > kMatVecTokens (floats; tile_floats of them, at least
// one row of W): weights are dequantised into it a band of rows at a time for cuBLAS.
void multiply(DeviceContext& context, const DeviceMatrix& weights, const float* x, int64_t tokens,
              float* y, int64_t y_stride, float* tile, size_t tile_floats);

// out[t][i] = row ids[t] of `table`, times `scale`.
void embed_tokens(DeviceContext& context, const DeviceMatrix& table, const int32_t* ids,
                  int64_t tokens, float scale, float* out);

// out row r = x row r / rms(x row r) * weight, rms = sqrt(mean(x^2) + epsilon) (sum in double).
// In place when out == x.
void rms_norm_rows(DeviceContext& context, const float* x, const float* weight, float* out,
                   int64_t rows, int64_t width, float epsilon);

// Gathers rows: out[i] = x[indices[i]] (width floats each).
void gather_rows(DeviceContext& context, const float* x, const int32_t* indices, int64_t count,
                 int64_t width, float* out);
// Scatters rows: out[indices[i]] = x[i].
void scatter_rows(DeviceContext& context, const float* x, const int32_t* indices, int64_t count,
                  int64_t width, float* out);

// Rotates every head of every token: x is [tokens][heads][head_dim]; cosines and sines are
// [tokens][pairs]; pair i is (2i, 2i+1) with adjacent_pairs, else (i, i + pairs).
void rope_rows(DeviceContext& context, float* x, int64_t tokens, int64_t heads, int64_t head_dim,
               const float* cosines, const float* sines, int64_t pairs, bool adjacent_pairs);

// rows[t * width + i] += bias[i].
void add_bias_rows(DeviceContext& context, float* rows, const float* bias, int64_t width,
                   int64_t count);
// y[i] += x[i].
void add(DeviceContext& context, float* y, const float* x, int64_t count);
// out[i] = act(gate[i]) * up[i]: SiLU, or GELU's tanh form when `gelu`.
void gated_activation(DeviceContext& context, bool gelu, const float* gate, const float* up,
                      float* out, int64_t count);
// x[i] = cap * tanh(x[i] / cap).
void soft_cap(DeviceContext& context, float* x, int64_t count, float cap);

// The device KV pool's block layout: for each layer and KV head, keys then values, each
// [block_tokens][head_dim], in the pool's element type (f16 rounded to nearest even, or f32).
struct KvLayout {
  KvType type = KvType::f16;
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_tokens = 16;
  CHATFLOW_HOST_DEVICE size_t block_elements() const {
    return static_cast<size_t>(layers * kv_heads * 2 * block_tokens * head_dim);
  }
  CHATFLOW_HOST_DEVICE size_t key_offset(int64_t layer, int64_t kv_head) const {
    return static_cast<size_t>(((layer * kv_heads + kv_head) * 2) * block_tokens * head_dim);
  }
};

// Where each token of a step sits in the pool: its block, its slot in the block, and for its
// attention its sequence's block table (in `tables`, from table_start) and positions.
struct StepPositions {
  const int32_t* blocks;          // [tokens] the block holding the token's position
  const int32_t* slots;           // [tokens] position % block_tokens
  const int32_t* tables;          // every sequence's block table, one after another
  const int32_t* table_start;     // [tokens] where the token's sequence's table starts
  const int32_t* positions;       // [tokens] positions the token attends to (its position + 1)
  const int32_t* first_position;  // [tokens] 0, or a sliding window's first position
};

// Writes keys [tokens][kv_heads * head_dim] and values of `layer` into the pool.
void store_keys_and_values(DeviceContext& context, const KvLayout& layout, void* pool,
                           const StepPositions& where, int64_t tokens, int64_t layer,
                           const float* keys, const float* values);

// For each token and query head: softmax over its positions [first_position, positions) of
// scale * q.k (soft-capped when softcap > 0), times the values; queries and out are
// [tokens][heads * head_dim], query head h reads KV head h / (heads / kv_heads). head_dim at most
// kMaxHeadDim.
inline constexpr int64_t kMaxHeadDim = 256;
void attention(DeviceContext& context, const KvLayout& layout, const void* pool,
               const StepPositions& where, int64_t tokens, int64_t layer, int64_t heads,
               float scale, float softcap, const float* queries, float* out);

// Mixture of experts: out[t] = sum_k weights[t * used + k] * expert_rows[t * used + k] in k
// order, plus shared[t] * sigmoid(shared_gate . normed[t]) when shared is not null.
void combine_experts(DeviceContext& context, const float* expert_rows, const float* weights,
                     int64_t tokens, int64_t used, int64_t dim, const float* shared,
                     const float* shared_gate, const float* normed, float* out);

// A token drawn greedily where its logits are: the host's sample_token (sampler.h) with
// temperature 0, step for step: the constraint's mask (forbidden logits become -infinity),
// log-probabilities under it (the chosen token's, and the best `top_logprobs` alternatives, by
// logit then lower id), the penalties over (token, count) pairs, then the highest logit (the
// lower id on ties).
inline constexpr int kMaxTopLogprobs = 20;
struct GreedyDraw {
  int32_t row = 0;           // of the logits
  int32_t mask_offset = -1;  // first word in `masks`; -1: no constraint
  int32_t mask_words = 0;
  int32_t penalty_offset = 0;  // first pair in the penalty arrays
  int32_t penalty_count = 0;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_logprobs = 0;
  int32_t want_logprobs = 0;
};
struct DrawnToken {
  int32_t token = 0;
  float logprob = 0;
  int32_t top_count = 0;
  int32_t top_tokens[kMaxTopLogprobs] = {};
  float top_logprobs[kMaxTopLogprobs] = {};
};
// Draws `count` tokens; `logits` rows are changed (masked, penalised). `penalty_raw` receives
// each penalised token's logit before its penalty (one float per pair).
void draw_greedy(DeviceContext& context, float* logits, int64_t vocabulary, const GreedyDraw* draws,
                 int64_t count, const uint64_t* masks, const int32_t* penalty_tokens,
                 const int32_t* penalty_counts, float* penalty_raw, DrawnToken* out);

static_assert(sizeof(GreedyDraw) + sizeof(DrawnToken) <= 256, "the memory plan counts 256 bytes");

}  // namespace chatflow::kernels::cuda
