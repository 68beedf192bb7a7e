// A model's hyperparameters, read from its GGUF metadata ({architecture}.*). The forward pass is
// driven entirely by these: nothing is assumed about a particular model's shape, and an
// architecture or rope form this file does not describe is refused by name rather than run
// as something it is not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/engine/gguf_file.h"

namespace chatflow::engine {

// How rotary embeddings pair dimensions: adjacent pairs (llama's GGUF layout) or the two halves
// of each head (GPT-NeoX style: qwen2, qwen3, gemma, phi3).
enum class RopeStyle { adjacent_pairs, halves };

// The feed-forward activation applied to the gate before it multiplies the up projection.
enum class Activation { silu, gelu_tanh };

// How positions become rotation angles: llama.cpp's rope with its YaRN extension. For dimension
// pair i, theta = position * base^(-2i/dims) / frequency_factor[i]; linear scaling multiplies it
// by position_scale; YaRN blends the scaled and unscaled angle per pair; every cosine and sine is
// multiplied by magnitude.
struct RopeParameters {
  float base = 10000.0f;
  float position_scale = 1.0f;  // 1 / the scaling factor (linear and YaRN)
  bool yarn = false;
  float yarn_low = 0, yarn_high = 0;  // the correction range of pairs, from the original context
  float magnitude = 1.0f;
  std::vector<float> frequency_factors;  // per pair; empty: all 1 (Llama 3, LongRoPE tensors)
};

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
  int64_t rope_dimensions = 0;
  RopeStyle rope_style = RopeStyle::adjacent_pairs;
  // The rope of full-attention layers, and of sliding-window layers (gemma3 gives those a base of
  // their own and no scaling; elsewhere the two are the same).
  RopeParameters rope, sliding_rope;
  bool sliding_rope_differs = false;
  Activation activation = Activation::silu;
  bool attention_bias = false;     // q, k and v projections have biases (qwen2, some llama files)
  bool query_key_norm = false;     // qwen3, gemma3: per-head RMSNorm of queries and keys
  bool post_norms = false;         // gemma2/3: RMSNorm of the attention and FFN outputs
  bool fused_projections = false;  // phi3: one qkv matrix, one gate+up matrix
  // Mixture of experts (mixtral: llama with experts; qwen2moe): a router picks experts_used of
  // `experts` feed-forward networks per token, weighted by its softmax (renormalised over the
  // chosen ones for mixtral); qwen2moe adds a shared expert behind a sigmoid gate.
  int64_t experts = 0;
  int64_t experts_used = 0;
  int64_t expert_ffn = 0;         // each expert's feed-forward length
  int64_t shared_expert_ffn = 0;  // 0: no shared expert
  bool renormalise_expert_weights = false;
  float embedding_scale = 1.0f;  // gemma: sqrt(dim)
  float attention_scale = 0;     // multiplies q.k; 1/sqrt(head_dim) unless the family differs
  float attention_softcap = 0;   // gemma2: scores become cap * tanh(score / cap); 0: none
  float final_softcap = 0;       // gemma2: the same on the logits
  // Sliding-window attention: a token sees the last `sliding_window` positions (itself
  // included) in the layers where sliding_layer(layer) holds. 0: every layer sees everything.
  int64_t sliding_window = 0;
  // Which layers slide: all (mistral, phi3), the even ones (gemma2), or all but every
  // sliding_period-th (gemma3: five local layers, then a global one).
  enum class SlidingLayers { all, even, all_but_every_period } sliding_layers = SlidingLayers::all;
  int64_t sliding_period = 1;
  std::string chat_template;

  bool sliding_layer(int64_t layer) const {
    if (sliding_window <= 0) return false;
    switch (sliding_layers) {
      case SlidingLayers::all:
        return true;
      case SlidingLayers::even:
        return layer % 2 == 0;
      case SlidingLayers::all_but_every_period:
        return (layer + 1) % sliding_period != 0;
    }
    return false;
  }
  const RopeParameters& rope_of(int64_t layer) const {
    return sliding_layer(layer) ? sliding_rope : rope;
  }

  // Throws GgufError for unknown architectures, missing keys and inconsistent values.
  static ModelConfig from_gguf(const GgufFile& file);
};

// The architectures from_gguf understands, for messages.
const char* supported_architectures();

}  // namespace chatflow::engine
