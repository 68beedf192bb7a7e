#include "framework/engine/cuda/cuda_memory_plan.h"

#include <algorithm>
#include <cstdio>

namespace chatflow::engine {

uint64_t cuda_workspace_bytes(const ModelConfig& config, int64_t step_tokens, int64_t logit_rows,
                              uint64_t tile_bytes) {
  const int64_t q_dim = config.heads * config.head_dim;
  const int64_t kv_dim = config.kv_heads * config.head_dim;
  const int64_t ffn = std::max(config.ffn, std::max(config.expert_ffn, config.shared_expert_ffn));
  // hidden, normed, projected; queries and attention output; keys and values; gate, up and the
  // activation; two rotation tables of cosines and sines.
  int64_t floats_per_token =
      3 * config.dim + 2 * q_dim + 2 * kv_dim + 3 * ffn + 2 * 2 * (config.rope_dimensions / 2);
  if (config.experts > 0) {
    // the router row, each chosen expert's output, an expert's input and result rows, and the
    // shared expert's output
    floats_per_token += config.experts + config.experts_used * config.dim + 3 * config.dim;
  }
  const int64_t final_rows = logit_rows * (config.dim + config.vocabulary);
  // token ids, block, slot, table start, positions, two first positions and a logits row's token
  // per token, and each token's sequence's block table at most
  const int64_t table_blocks = (config.context + 15) / 16;
  const int64_t index_bytes = step_tokens * (8 + table_blocks) * 4;
  // a greedy draw per token: its constraint mask (a bit per token of the vocabulary), its
  // description and its result (at most 256 bytes); penalised tokens are not planned: at most the
  // history of each draw, a few KiB in practice
  const int64_t draw_bytes = step_tokens * ((config.vocabulary + 63) / 64 * 8 + 256);
  return static_cast<uint64_t>(step_tokens * floats_per_token + final_rows) * sizeof(float) +
         static_cast<uint64_t>(index_bytes + draw_bytes) + tile_bytes;
}

std::string format_device_bytes(uint64_t bytes) {
  char text[32];
  if (bytes >= (uint64_t{1} << 30)) {
    std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  } else {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  }
  return text;
}

std::optional<std::string> device_memory_shortfall(const DeviceMemoryPlan& plan,
                                                   uint64_t free_bytes, uint64_t headroom_bytes,
                                                   std::string_view device) {
  const uint64_t usable = free_bytes > headroom_bytes ? free_bytes - headroom_bytes : 0;
  if (plan.total() <= usable) return std::nullopt;
  std::string message =
      "the model does not fit on " + std::string(device) + ": weights " +
      format_device_bytes(plan.weight_bytes) + " + KV pool " +
      format_device_bytes(plan.kv_pool_bytes) + " + workspace " +
      format_device_bytes(plan.workspace_bytes) + " = " + format_device_bytes(plan.total()) +
      ", but " + format_device_bytes(free_bytes) + " is free (" +
      format_device_bytes(headroom_bytes) + " kept for the CUDA runtime and cuBLAS); ";
  if (plan.weight_bytes > usable) {
    message +=
        "the weights alone are too large: use a smaller quantisation of the model "
        "(make-model/quantize), or backend: cpu";
  } else {
    message += "lower kv_cache.blocks (or scheduler.max_seqs) or scheduler.max_batched_tokens";
  }
  return message;
}

}  // namespace chatflow::engine
