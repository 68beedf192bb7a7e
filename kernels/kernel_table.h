// The engine's device interface: the table of operations the transformer calls, one table per
// device (today the CPU, one table per instruction set). The transformer never branches on the
// device or the instruction set; a second backend fills a table of its own.
//
// Every dot product is reduced in the same order whatever the batch (how many tokens, which rows
// a thread takes): a sequence's logits do not depend on what else shares the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

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

// How the KV cache stores keys and values. f16 (llama.cpp's default too) halves the memory
// attention streams through at every step; f32 keeps them exactly as computed.
enum class KvType { f32 = 0, f16 = 1 };
std::string_view to_string(KvType type);
inline size_t kv_element_bytes(KvType type) {
  return type == KvType::f16 ? 2 : 4;
}

// Attention of `group_size` query heads sharing one key/value head, for one token, over
// `positions` cached positions stored in blocks of `block_tokens`: keys as
// [head_dim][block_tokens] and values as [block_tokens][head_dim] inside each block.
struct AttentionArgs {
  const float* queries;  // group_size x head_dim
  int64_t group_size;
  int64_t head_dim;
  const void* pool;            // the KV cache memory, elements of the table entry's KvType
  const int32_t* block_table;  // the sequence's blocks, in position order
  size_t block_stride;         // elements from one block to the next
  size_t key_offset;           // elements from a block's start to this layer's and head's keys
  size_t value_offset;         // ... and values
  int64_t block_tokens;
  int64_t positions;
  float scale;
  float* scores;  // scratch: group_size x (positions rounded up to block_tokens)
  float* out;     // group_size x head_dim
};

struct KernelTable {
  std::string_view instruction_set;
  void (*matmul[5])(const MatmulArgs& args);               // indexed by matmul_index(type)
  void (*packed_matmul[3])(const PackedMatmulArgs& args);  // indexed by packed_index(type)
  void (*attention[2])(const AttentionArgs& args);         // indexed by KvType
  // out[i] = silu(gate[i]) * up[i]
  void (*silu_multiply)(const float* gate, const float* up, float* out, int64_t count);
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
  // even): keys and values into the KV cache. Indexed by KvType.
  void (*store_kv[2])(const float* values, void* out, int64_t count, int64_t out_stride);
  // One row of a stored matrix as floats (the token embedding lookup).
  void (*dequantize_row)(TensorType type, const uint8_t* row, int64_t columns, float* out);
};

int matmul_index(TensorType type);
int packed_index(TensorType type);  // f32 0, f16 1, bf16 2

}  // namespace chatflow::kernels
