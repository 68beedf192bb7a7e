// How a KV cache stores keys and values, for every backend. f16 (llama.cpp's default too) halves
// the memory attention streams through at every step; f32 keeps them exactly as computed; q8_0
// (llama.cpp's -ctk/-ctv q8_0) halves f16 again: each head's row of one position in blocks of 32
// values with one f16 scale (34 bytes per 32 values), as llama.cpp's Q8_0 blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace chatflow::kernels {

enum class KvType { f32 = 0, f16 = 1, q8_0 = 2 };
inline constexpr int kKvTypes = 3;

inline std::string_view to_string(KvType type) {
  switch (type) {
    case KvType::f32:
      return "f32";
    case KvType::f16:
      return "f16";
    case KvType::q8_0:
      return "q8_0";
  }
  return "f16";
}

// Values per block of the type (one scale per block): 1 for the plain types.
inline int64_t kv_block_values(KvType type) {
  return type == KvType::q8_0 ? 32 : 1;
}

// A q8_0 block: the f16 scale d, then 32 signed values; x = d * q.
inline constexpr size_t kKvQ8Bytes = 34;

// Bytes of `values` keys or values of one position (a multiple of kv_block_values(type)).
inline size_t kv_row_bytes(KvType type, int64_t values) {
  switch (type) {
    case KvType::f32:
      return static_cast<size_t>(values) * 4;
    case KvType::f16:
      return static_cast<size_t>(values) * 2;
    case KvType::q8_0:
      return static_cast<size_t>(values / 32) * kKvQ8Bytes;
  }
  return 0;
}

}  // namespace chatflow::kernels
