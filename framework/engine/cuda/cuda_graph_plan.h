// Which decode steps the CUDA backend replays as captured CUDA graphs, worked out on the host and
// tested without a device. A decode step launches ~15 kernels per layer for a handful of tokens:
// replaying them as one graph removes the launch cost that dominates small batches. A graph is
// captured once per batch-size bucket; a step of n tokens runs in the smallest bucket that holds
// it, padded with tokens that write to a scratch block and whose rows are ignored.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "framework/engine/backend.h"
#include "framework/engine/model_config.h"

namespace chatflow::engine {

// The most tokens a captured step holds: larger decode batches are rare and gain little.
inline constexpr int64_t kLargestDecodeGraph = 128;

// 1, 2, 4, then every multiple of 8 (vLLM's buckets), up to the smaller of `max_step_tokens`
// and kLargestDecodeGraph, which is always the last.
std::vector<int64_t> decode_graph_buckets(int64_t max_step_tokens);

// The smallest bucket holding `tokens`, or 0 when none does.
int64_t decode_graph_bucket(std::span<const int64_t> buckets, int64_t tokens);

// Whether a step can replay a graph: every chunk is one token that wants a token drawn (a decode
// step), and the model has no experts (their routing waits for the host in the middle of a layer).
bool replays_decode_graph(const ModelConfig& config, std::span<const StepChunk> chunks);

}  // namespace chatflow::engine
