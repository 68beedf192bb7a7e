// The CPU kernel table: the operations the CPU backend's transformer
// (framework/engine/cpu/transformer.h) calls on host pointers, one table per instruction set
// (cpu_kernels.h picks the best for the processor). It is the CPU backend's own dispatch, not
// the engine's device seam: that is framework/engine/backend.h, one call per step, which a
// device backend fills with kernels of its own.
//
// Every dot product is reduced in the same order whatever the batch (how many tokens, which rows
// a thread takes): a sequence's logits do not depend on what else shares the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/kv_type.h"
#include "kernels/tensor_type.h"

namespace chatflow::kernels {

// y[t * y_stride + r] = sum_k W[r][k] * x[t * x_stride + k], for r in [row_begin, row_end) and
// t in [0, tokens). W is row-major with `row_bytes` per row, in the table entry's type.
struct MatmulArgs {
  const uint8_t* weights;
  size_t row_bytes;
  int64_t columns;
  int64_t row_begin;
  int64_t row_end;
  const float* x;
  int64_t x_stride;
  int64_t tokens;
  float* y;
  int64_t y_stride;
  float* scratch;  // matmul_scratch_floats(tokens) floats; may be null when tokens <= 4
};

// y[t * y_stride + r] = sum_k W[r][k] * x[t * x_stride + k] for the rows of panels
// [panel_begin, panel_end) and t in [0, tokens), from a packed matrix of `rows` rows. The
// canonical arithmetic: each (row, token) sum is one chain of fused multiply-adds over k in
// increasing order starting from zero, whatever the batch or the panels a thread takes.
struct PackedMatmulArgs {
  const uint8_t* panels;
  int64_t rows;
  int64_t columns;
  int64_t panel_begin;
  int64_t panel_end;
  const float* x;
  int64_t x_stride;
  int64_t tokens;
  float* y;
  int64_t y_stride;
};

// Activations quantised to 8 bits for the integer products with quantised weights, once per
// step for each matrix input. Per token: `columns` int8 values; one float scale per block (32
// values for the 32-value weight formats, 256 for the k-quants and iq4_xs); and the sums of
// the int8 values per group (32 values, or 16 for the 256-value blocks), as int16 and times
// their block's scale, which the formats with a minimum or an offset need.
enum class ActivationFormat { blocks32 = 0, blocks256 = 1 };
ActivationFormat activation_format(TensorType weights);

struct ActivationLayout {
  ActivationFormat format = ActivationFormat::blocks32;
  int64_t columns = 0;
  int64_t block = 32;  // values per scale
  int64_t group = 32;  // values per sum
  size_t scales_offset = 0;
  size_t sums_offset = 0;
  size_t scaled_sums_offset = 0;  // float per group: its sum times its block's scale
  size_t token_bytes = 0;         // a multiple of 64
};
ActivationLayout activation_layout(ActivationFormat format, int64_t columns);

// The int8 values, scales and sums of one token in a buffer laid out as `layout` says.
struct TokenActivations {
  const int8_t* values;
  const float* scales;
  const int16_t* sums;
  const float* scaled_sums;
};
inline TokenActivations token_activations(const uint8_t* buffer, const ActivationLayout& layout,
                                          int64_t token) {
  const uint8_t* base = buffer + static_cast<size_t>(token) * layout.token_bytes;
  return {reinterpret_cast<const int8_t*>(base),
          reinterpret_cast<const float*>(base + layout.scales_offset),
          reinterpret_cast<const int16_t*>(base + layout.sums_offset),
          reinterpret_cast<const float*>(base + layout.scaled_sums_offset)};
}

// y[t * y_stride + r] = sum_k W[r][k] * x[t][k] for r in [row_begin, row_end), t in [0, tokens),
// with W quantised (the table entry's type, `row_bytes` per row) and x quantised activations
// in the format activation_format(type) gives. Each (row, token) result is the same whatever
// the tokens or rows that share a call: integer dot products per block are exact, and their
// scaled sums are accumulated in one fixed order.
struct QuantizedMatmulArgs {
  const uint8_t* weights;
  size_t row_bytes;
  int64_t columns;
  int64_t row_begin;
  int64_t row_end;
  const uint8_t* x;  // activations, layout.token_bytes per token
  const ActivationLayout* layout;
  int64_t tokens;
  float* y;
  int64_t y_stride;
};

// The quantised weight types the integer kernels multiply, in table order.
inline constexpr int kQuantizedKernelTypes = 12;
// Index into CpuKernelTable::quantized_matmul, or -1 for a type without an integer kernel.
int quantized_index(TensorType type);

// Attention of `group_size` query heads sharing one key/value head, for one token, over
// `positions` cached positions stored in blocks of `block_tokens`. Inside each block, for f32 and
// f16: keys as [head_dim][block_tokens] and values as [block_tokens][head_dim]; for q8_0: keys
// and values as [block_tokens] rows of head_dim / 32 Q8_0 blocks (kv_type.h), dequantised as
// they are read.
struct AttentionArgs {
  const float* queries;  // group_size x head_dim
  int64_t group_size;
  int64_t head_dim;
  const void* pool;            // the KV cache memory, in the table entry's KvType
  const int32_t* block_table;  // the sequence's blocks, in position order
  size_t block_stride;         // bytes from one block to the next
  size_t key_offset;           // bytes from a block's start to this layer's and head's keys
  size_t value_offset;         // ... and values
  int64_t block_tokens;
  int64_t positions;
  // Positions before this one are outside a sliding window and get no weight (0: none).
  int64_t first_position;
  float scale;
  // Scores become softcap * tanh(score / softcap) before the softmax (gemma2); 0: left as is.
  float softcap;
  float* scores;  // scratch: group_size x (positions rounded up to block_tokens)
  float* out;     // group_size x head_dim
};

struct CpuKernelTable {
  std::string_view instruction_set;
  void (*matmul[3])(const MatmulArgs& args);               // f32, f16, bf16 (float_type_index)
  void (*packed_matmul[3])(const PackedMatmulArgs& args);  // f32, f16, bf16 (float_type_index)
  void (*attention[kKvTypes])(const AttentionArgs& args);  // indexed by KvType
  // out[i] = silu(gate[i]) * up[i]
  void (*silu_multiply)(const float* gate, const float* up, float* out, int64_t count);
  // out[i] = gelu(gate[i]) * up[i], GELU in its tanh form (gemma)
  void (*gelu_multiply)(const float* gate, const float* up, float* out, int64_t count);
  // out[i] = x[i] / rms(x) * weight[i], rms(x) = sqrt(mean(x[i]^2) + epsilon), the mean summed
  // in double in index order.
  void (*rms_norm)(const float* x, const float* weight, float* out, int64_t count, float epsilon);
  // Rotates `pairs` pairs of `head` by the angles whose cosines and sines are given: pair i is
  // (2i, 2i+1) with adjacent_pairs (llama), else (i, i + pairs) (NeoX, qwen2).
  void (*rope)(float* head, const float* cosines, const float* sines, int64_t pairs,
               bool adjacent_pairs);
  // y[i] += x[i] (residual connections).
  void (*add)(float* y, const float* x, int64_t count);
  // rows[t * width + i] += bias[i] for t in [0, rows).
  void (*add_bias)(float* rows, const float* bias, int64_t width, int64_t row_count);
  // out[i * out_stride] = values[i], in the cache's element type (for f16 rounded to nearest
  // even): keys and values into the KV cache. Indexed by KvType. q8_0 writes count / 32 blocks
  // in a row (out_stride 1), each quantised as llama.cpp's quantize_row_q8_0_ref does.
  void (*store_kv[kKvTypes])(const float* values, void* out, int64_t count, int64_t out_stride);
  // One row of a stored matrix as floats (the token embedding lookup).
  void (*dequantize_row)(TensorType type, const uint8_t* row, int64_t columns, float* out);
  // The integer products with quantised weights (indexed by quantized_index(type)) and the
  // quantisation of one token's activations (indexed by ActivationFormat) they read.
  std::string_view quantized_instruction_set;
  void (*quantized_matmul[kQuantizedKernelTypes])(const QuantizedMatmulArgs& args);
  void (*quantize_activations[2])(const float* x, const ActivationLayout& layout, uint8_t* out);
};

// The slot of a float type in the matmul and packed_matmul tables: f32 0, f16 1, bf16 2.
int float_type_index(TensorType type);

}  // namespace chatflow::kernels
