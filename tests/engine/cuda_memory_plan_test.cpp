// The CUDA backend's memory plan, checked without a device: what a step's workspace takes for a
// model's shapes, and the refusal that names every number when a model does not fit.
#include "framework/engine/cuda/cuda_memory_plan.h"

#include <gtest/gtest.h>

namespace chatflow::engine {
namespace {

ModelConfig llama_8b() {
  ModelConfig config;
  config.vocabulary = 128256;
  config.dim = 4096;
  config.layers = 32;
  config.heads = 32;
  config.kv_heads = 8;
  config.head_dim = 128;
  config.ffn = 14336;
  config.rope_dimensions = 128;
  return config;
}

TEST(CudaMemoryPlan, AStepsWorkspaceCountsEveryActivationTheLogitsTheTileAndTheIndices) {
  const ModelConfig config = llama_8b();
  // Per token: 3 x 4096 (hidden, normed, projected) + 2 x 4096 (queries, attention output)
  // + 2 x 1024 (keys, values) + 3 x 14336 (gate, up, activation) + 4 x 64 (rotation tables)
  // = 12288 + 8192 + 2048 + 43008 + 256 = 65792 floats.
  const uint64_t per_token_bytes = 65792 * 4;
  const uint64_t logits_row_bytes = (4096 + 128256) * 4;
  const uint64_t index_bytes_per_token = 8 * 4;
  // a greedy draw's mask (128256 bits in 64-bit words: 2004 words) and 256 bytes
  const uint64_t draw_bytes_per_token = 2004 * 8 + 256;
  EXPECT_EQ(
      cuda_workspace_bytes(config, 512, 1, 0),
      512 * (per_token_bytes + index_bytes_per_token + draw_bytes_per_token) + logits_row_bytes);
  EXPECT_EQ(cuda_workspace_bytes(config, 512, 4, kCudaTileBytes),
            512 * (per_token_bytes + index_bytes_per_token + draw_bytes_per_token) +
                4 * logits_row_bytes + (uint64_t{64} << 20));
}

TEST(CudaMemoryPlan, ExpertsAddTheirRowsToEachToken) {
  ModelConfig config = llama_8b();
  const uint64_t dense = cuda_workspace_bytes(config, 1, 0, 0);
  config.experts = 8;
  config.experts_used = 2;
  config.expert_ffn = 14336;
  // router row (8) + chosen experts' outputs (2 x 4096) + input, result and shared rows (3 x 4096)
  EXPECT_EQ(cuda_workspace_bytes(config, 1, 0, 0) - dense, (8 + 2 * 4096 + 3 * 4096) * 4u);
}

TEST(CudaMemoryPlan, APlanThatFitsBesideTheHeadroomIsAccepted) {
  DeviceMemoryPlan plan{uint64_t{16} << 30, uint64_t{8} << 30, uint64_t{1} << 30};
  EXPECT_EQ(device_memory_shortfall(plan, (uint64_t{25} << 30) + (uint64_t{512} << 20),
                                    uint64_t{512} << 20, "NVIDIA H100"),
            std::nullopt);
}

TEST(CudaMemoryPlan, APoolThatDoesNotFitIsRefusedWithEveryNumberAndTheKeysToChange) {
  DeviceMemoryPlan plan{uint64_t{15} << 30, uint64_t{64} << 30, uint64_t{1} << 29};
  const auto message =
      device_memory_shortfall(plan, uint64_t{78} << 30, uint64_t{512} << 20, "NVIDIA H100 80GB");
  ASSERT_TRUE(message);
  EXPECT_EQ(*message,
            "the model does not fit on NVIDIA H100 80GB: weights 15.00 GiB + KV pool 64.00 GiB "
            "+ workspace 512.0 MiB = 79.50 GiB, but 78.00 GiB is free (512.0 MiB kept for the "
            "CUDA runtime and cuBLAS); lower kv_cache.blocks (or scheduler.max_seqs) or "
            "scheduler.max_batched_tokens");
}

TEST(CudaMemoryPlan, WeightsLargerThanTheDeviceAskForASmallerFile) {
  DeviceMemoryPlan plan{uint64_t{90} << 30, 0, uint64_t{1} << 30};
  const auto message = device_memory_shortfall(plan, uint64_t{78} << 30, 0, "NVIDIA H100");
  ASSERT_TRUE(message);
  EXPECT_NE(message->find("the weights alone are too large"), std::string::npos) << *message;
  EXPECT_NE(message->find("90.00 GiB"), std::string::npos) << *message;
}

}  // namespace
}  // namespace chatflow::engine
