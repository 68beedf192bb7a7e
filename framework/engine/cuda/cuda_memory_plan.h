// What the CUDA backend will hold on its device (weights, the KV pool, a step's workspace),
// worked out before any of it is allocated, so that a model that does not fit is refused with
// the numbers instead of failing half-way through its upload. Plain arithmetic, compiled in every
// build and tested without a device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "framework/engine/model_config.h"

namespace chatflow::engine {

struct DeviceMemoryPlan {
  uint64_t weight_bytes = 0;
  uint64_t kv_pool_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t total() const { return weight_bytes + kv_pool_bytes + workspace_bytes; }
};

// Floats of dequantised weights one product over many tokens works on at a time (cuBLAS reads a
// band of rows from it): 64 MiB, or the largest matrix when that is smaller.
inline constexpr uint64_t kCudaTileBytes = uint64_t{64} << 20;

// The workspace of a step of `step_tokens` tokens (the scheduler's max_batched_tokens) with up to
// `logit_rows` vocabulary-sized rows, for `config`'s shapes: activations per token, the logits,
// the dequantisation tile (`tile_bytes`) and the step's index arrays (with block tables as long
// as the context in blocks of 16, for every token).
uint64_t cuda_workspace_bytes(const ModelConfig& config, int64_t step_tokens, int64_t logit_rows,
                              uint64_t tile_bytes);

// Why `plan` cannot be held by a device with `free_bytes` free ("the model does not fit on ...:
// weights 14.96 GiB + KV pool 8.00 GiB + workspace 1.20 GiB = 24.16 GiB, but 20.00 GiB is free;
// ..."), or nullopt when it fits. `headroom_bytes` stay free for the CUDA runtime and cuBLAS.
std::optional<std::string> device_memory_shortfall(const DeviceMemoryPlan& plan,
                                                   uint64_t free_bytes, uint64_t headroom_bytes,
                                                   std::string_view device);

// "14.96 GiB", "512.0 MiB"
std::string format_device_bytes(uint64_t bytes);

}  // namespace chatflow::engine
