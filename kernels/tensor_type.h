// Tensor element types as GGUF numbers them (ggml's type ids), with their block layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace chatflow::kernels {

enum class TensorType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q8_0 = 8,
  bf16 = 30,
};

// Quantised types store blocks of 32 values with one f16 scale per block.
inline constexpr int64_t kQuantBlock = 32;
inline constexpr size_t kQ8BlockBytes = 2 + 32;  // f16 scale, 32 x int8
inline constexpr size_t kQ4BlockBytes = 2 + 16;  // f16 scale, 32 x 4-bit (two per byte)

// The type for a GGUF type id this build can compute with, or nullopt.
std::optional<TensorType> tensor_type_from_id(uint32_t id);
// The name GGUF tools use for a type id ("f16", "q4_0", ...), also for ids we cannot compute.
std::string_view tensor_type_name(uint32_t id);
std::string_view to_string(TensorType type);
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Values per block (1 for f32/f16/bf16) and bytes per block.
int64_t block_values(TensorType type);
size_t block_bytes(TensorType type);
// Bytes of a row of `values` values; `values` must be a multiple of block_values(type).
size_t row_bytes(TensorType type, int64_t values);

}  // namespace chatflow::kernels
