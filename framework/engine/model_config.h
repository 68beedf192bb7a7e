// A model's hyperparameters, read from its GGUF metadata ({architecture}.*). The forward pass is
// driven entirely by these: nothing is assumed about a particular model's shape.
#pragma once

#include <cstdint>
#include <string>

#include "framework/engine/gguf_file.h"

namespace chatflow::engine {

// How rotary embeddings pair dimensions: adjacent pairs (llama's GGUF layout) or the two halves
// of each head (GPT-NeoX style, used by qwen2).
enum class RopeStyle { adjacent_pairs, halves };

struct ModelConfig {
  std::string architecture;
  int64_t vocabulary = 0;
  int64_t dim = 0;  // embedding length
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn = 0;  // feed-forward length
  int64_t context = 0;
  float rms_epsilon = 1e-5f;
  float rope_base = 10000.0f;
  float rope_position_scale = 1.0f;  // linear rope scaling: positions are divided by the factor
  int64_t rope_dimensions = 0;
  RopeStyle rope_style = RopeStyle::adjacent_pairs;
  bool attention_bias = false;  // qwen2: q, k and v projections have biases
  std::string chat_template;

  // Throws GgufError for unknown architectures, missing keys and inconsistent values.
  static ModelConfig from_gguf(const GgufFile& file);
};

}  // namespace chatflow::engine
