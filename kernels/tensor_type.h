// Tensor element types as GGUF numbers them (ggml's type ids), with their block layouts. Every
// type a valid GGUF file may hold has a layout here, so any file can be read and described;
// `computable` says which ones the kernels can multiply with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chatflow::kernels {

enum class TensorType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
};

// Values per block of the 32-value ("legacy") formats and of the 256-value super-blocks of the
// k-quants and iq4_xs.
inline constexpr int64_t kQuantBlock = 32;
inline constexpr int64_t kSuperBlock = 256;

// The type for a GGUF type id with a known layout (whether or not chatflow computes with it).
std::optional<TensorType> tensor_type_from_id(uint32_t id);
// The name GGUF tools use ("f16", "q4_k", ...); "unknown" for ids without a layout.
std::string_view tensor_type_name(uint32_t id);
std::string_view to_string(TensorType type);
// By name, any case ("Q4_K" or "q4_k"); only types chatflow can write and compute with.
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Whether the kernels can compute with the type, and the list of those types for messages.
bool computable(TensorType type);
std::string computable_type_names();
// Quantised formats: blocks of several values sharing scales (not f32/f16/bf16).
bool is_quantized(TensorType type);

// Values per block (1 for plain numbers) and bytes per block.
int64_t block_values(TensorType type);
size_t block_bytes(TensorType type);
// Bytes of a row of `values` values; `values` must be a multiple of block_values(type).
size_t row_bytes(TensorType type, int64_t values);

}  // namespace chatflow::kernels
