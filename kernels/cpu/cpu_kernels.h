// The CPU kernels behind one table of operations, filled once with the best instruction set the
// processor has (AVX-512, AVX2+FMA+F16C, or portable scalar code). Callers never branch on the
// instruction set.
//
// Every dot product is reduced in the same order whatever the batch (how many tokens, which
// rows a thread takes): a sequence's logits do not depend on what else shares the step.
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

// The register tile of matrix products over many tokens: rows x tokens.
inline constexpr int kManyTokenRows = 6;
inline constexpr int kManyTokenTile = 4;

// Scratch a matmul over `tokens` tokens needs (partial sums between column blocks), for any
// vector width up to 16 floats.
inline int64_t matmul_scratch_floats(int64_t tokens) {
  return (tokens + kManyTokenTile - 1) / kManyTokenTile * kManyTokenRows * kManyTokenTile * 16;
}

// Matrices of unquantised types (f32, f16, bf16) are also kept packed for products over many
// tokens: panels of kPanelRows rows, each stored column by column (panel p holds W[p * kPanelRows
// + i][k] at element k * kPanelRows + i, in the matrix's type; a short last panel is padded with
// zeros). One column of a panel is two AVX-512 vectors: the kernel broadcasts each token's input
// and multiplies whole panel columns, so a weight is converted once for a whole tile of tokens
// and no horizontal sums are needed.
inline constexpr int64_t kPanelRows = 32;

// Whether `type` has a packed form, and its size.
bool packable(TensorType type);
size_t packed_bytes(TensorType type, int64_t rows, int64_t columns);
// Packs a row-major matrix (`row_bytes` per row) into `out` (packed_bytes long).
void pack_matrix(TensorType type, const uint8_t* rows, size_t row_bytes, int64_t row_count,
                 int64_t columns, uint8_t* out);

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

struct CpuKernelTable {
  std::string_view instruction_set;
  void (*matmul[5])(const MatmulArgs& args);               // indexed by matmul_index(type)
  void (*packed_matmul[3])(const PackedMatmulArgs& args);  // indexed by packed_index(type)
  void (*attention[2])(const AttentionArgs& args);         // indexed by KvType
  // out[i] = silu(gate[i]) * up[i]
  void (*silu_multiply)(const float* gate, const float* up, float* out, int64_t count);
  // out[i * out_stride] = values[i] as IEEE half, rounded to nearest even (keys and values into
  // an f16 KV cache).
  void (*to_f16)(const float* values, uint16_t* out, int64_t count, int64_t out_stride);
};

int matmul_index(TensorType type);
int packed_index(TensorType type);  // f32 0, f16 1, bf16 2

enum class InstructionSet { scalar, avx2, avx512 };

// The best table for this processor (CHATFLOW_ISA=scalar|avx2|avx512 forces a lower one).
const CpuKernelTable& cpu_kernels();
// A specific table, or nullptr when the processor cannot run it.
const CpuKernelTable* cpu_kernels(InstructionSet instruction_set);

namespace detail {
extern const CpuKernelTable kScalarKernels;
extern const CpuKernelTable kAvx2Kernels;
extern const CpuKernelTable kAvx512Kernels;
}  // namespace detail

}  // namespace chatflow::kernels
