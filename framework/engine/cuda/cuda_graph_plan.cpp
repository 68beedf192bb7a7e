#include "framework/engine/cuda/cuda_graph_plan.h"

#include <algorithm>

namespace chatflow::engine {

std::vector<int64_t> decode_graph_buckets(int64_t max_step_tokens) {
  const int64_t largest = std::min(max_step_tokens, kLargestDecodeGraph);
  std::vector<int64_t> buckets;
  for (int64_t size : {1, 2, 4}) {
    if (size < largest) buckets.push_back(size);
  }
  for (int64_t size = 8; size < largest; size += 8)
    buckets.push_back(size);
  if (largest > 0) buckets.push_back(largest);
  return buckets;
}

int64_t decode_graph_bucket(std::span<const int64_t> buckets, int64_t tokens) {
  auto found = std::lower_bound(buckets.begin(), buckets.end(), tokens);
  return found == buckets.end() ? 0 : *found;
}

bool replays_decode_graph(const ModelConfig& config, std::span<const StepChunk> chunks) {
  if (config.experts > 0 || chunks.empty()) return false;
  return std::all_of(chunks.begin(), chunks.end(), [](const StepChunk& chunk) {
    return chunk.tokens.size() == 1 && chunk.want == StepChunk::Want::token;
  });
}

}  // namespace chatflow::engine
