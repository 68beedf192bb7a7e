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

// Attention of `group_size` query heads sharing one key/value head, for one token, over
// `positions` cached positions stored in blocks of `block_tokens`: keys as
// [head_dim][block_tokens] and values as [block_tokens][head_dim] inside each block.
struct AttentionArgs {
  const float* queries;  // group_size x head_dim
  int64_t group_size;
  int64_t head_dim;
  const float* pool;           // the KV cache memory
  const int32_t* block_table;  // the sequence's blocks, in position order
  size_t block_stride;         // floats from one block to the next
  size_t key_offset;           // floats from a block's start to this layer's and head's keys
  size_t value_offset;         // ... and values
  int64_t block_tokens;
  int64_t positions;
  float scale;
  float* scores;  // scratch: group_size x (positions rounded up to block_tokens)
  float* out;     // group_size x head_dim
};

struct CpuKernelTable {
  std::string_view instruction_set;
  void (*matmul[5])(const MatmulArgs& args);  // indexed by matmul_index(type)
  void (*attention)(const AttentionArgs& args);
  // out[i] = silu(gate[i]) * up[i]
  void (*silu_multiply)(const float* gate, const float* up, float* out, int64_t count);
};

int matmul_index(TensorType type);

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
