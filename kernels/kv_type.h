// How a KV cache stores keys and values, for every backend. f16 (llama.cpp's default too) halves
// the memory attention streams through at every step; f32 keeps them exactly as computed.
#pragma once

#include <cstddef>
#include <string_view>

namespace chatflow::kernels {

enum class KvType { f32 = 0, f16 = 1 };

inline std::string_view to_string(KvType type) {
  return type == KvType::f16 ? "f16" : "f32";
}

inline size_t kv_element_bytes(KvType type) {
  return type == KvType::f16 ? 2 : 4;
}

}  // namespace chatflow::kernels
