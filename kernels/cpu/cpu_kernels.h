// The CPU's kernel tables (cpu_kernel_table.h), one per instruction set (AVX-512, AVX2+FMA+F16C, or
// portable scalar code), the best one chosen once for the processor; and the packed layout of
// matrices over many tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/cpu/cpu_kernel_table.h"
#include "kernels/tensor_type.h"

namespace chatflow::kernels {

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

// The float kernels come in three widths; the integer kernels for quantised weights also
// depend on VNNI (AVX-VNNI on 256-bit-only processors, AVX-512 VNNI), so a table is one of:
//   scalar, avx2 (AVX2 + FMA + F16C), avx_vnni (avx2 + AVX-VNNI), avx512 (AVX-512 F/BW/VL/DQ,
//   integer kernels as avx2), avx512_vnni (avx512 + AVX-512 VNNI), avx512_amx (avx512_vnni with
//   AMX-INT8 tiles for q4_k, q6_k and q8_0, where the OS grants the tile state).
enum class InstructionSet { scalar, avx2, avx_vnni, avx512, avx512_vnni, avx512_amx };
inline constexpr InstructionSet kInstructionSets[] = {
    InstructionSet::scalar, InstructionSet::avx2,        InstructionSet::avx_vnni,
    InstructionSet::avx512, InstructionSet::avx512_vnni, InstructionSet::avx512_amx};
std::string_view to_string(InstructionSet instruction_set);

// The best table for this processor (CHATFLOW_ISA names a lower one to force it).
const CpuKernelTable& cpu_kernels();
// A specific table, or nullptr when the processor cannot run it.
const CpuKernelTable* cpu_kernels(InstructionSet instruction_set);

// The integer kernels of one instruction set (kernels/cpu/quantized_*.cpp).
struct QuantizedKernels {
  std::string_view name;
  void (*matmul[kQuantizedKernelTypes])(const QuantizedMatmulArgs& args);
};
// One token's activations quantised (scalar: every instruction set reads the same values; the
// AVX-512 tables use a vector routine writing the same bytes).
void quantize_activations(const float* x, const ActivationLayout& layout, uint8_t* out);

namespace detail {
extern const CpuKernelTable kScalarKernels;
extern const CpuKernelTable kAvx2Kernels;
extern const CpuKernelTable kAvx512Kernels;
extern const QuantizedKernels kScalarQuantized;
extern const QuantizedKernels kAvx2Quantized;
extern const QuantizedKernels kAvxVnniQuantized;
extern const QuantizedKernels kAvx512VnniQuantized;
// Only the types with a tile kernel; the others are avx512_vnni's.
extern const QuantizedKernels kAmxQuantized;
void quantize_activations_avx512(const float* x, const ActivationLayout& layout, uint8_t* out);
}  // namespace detail

}  // namespace chatflow::kernels
