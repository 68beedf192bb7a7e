// GGUF embedding models: text (as token ids) to one pooled, L2-normalised vector per input, the
// way llama.cpp b4748's llama-embedding computes it. Two kinds of file:
// - encoders: `bert` (token + token-type 0 + absolute position embeddings, LayerNorm, then per
//   layer bidirectional attention with biases, residual, LayerNorm, GELU feed-forward with
//   biases, residual, LayerNorm) and `nomic-bert` (the same with fused qkv and NeoX rope instead
//   of positions, and a SwiGLU feed-forward without biases);
// - decoders of the llama family (llama, qwen2, qwen3, without experts or sliding windows): the
//   causal forward pass to the final RMSNorm, whose rows are pooled.
// Each input is its own sequence (no KV cache: the whole input is one pass). Pooling: mean of
// all rows, the first row (cls) or the last row (last), from `<arch>.pooling_type` in the file
// (1 mean, 2 cls, 3 last) unless the caller chooses.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/engine/gguf_file.h"
#include "framework/engine/model_config.h"
#include "framework/engine/tokenizer.h"

namespace chatflow::engine {

enum class Pooling { unspecified, mean, cls, last };

// "mean", "cls", "last" (and "auto" or "" for unspecified); std::invalid_argument otherwise.
Pooling pooling_from_name(const std::string& name);
const char* pooling_name(Pooling pooling);

// Pools `tokens` rows of `width` floats (row-major) into `out` (width floats).
void pool_rows(Pooling pooling, const float* rows, int64_t tokens, int64_t width, float* out);
// Scales `vector` to unit length (llama-embedding's --embd-normalize 2); all zeros stay zeros.
void normalize_l2(std::span<float> vector);

class EmbeddingModel {
 public:
  virtual ~EmbeddingModel() = default;

  // Loads `path`. `pooling` overrides the file's <arch>.pooling_type; a file without one needs
  // it. Throws GgufError naming what is wrong or unsupported (an architecture, a tensor).
  static std::unique_ptr<EmbeddingModel> load(const std::string& path,
                                              Pooling pooling = Pooling::unspecified);

  virtual const std::string& architecture() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual int64_t dimensions() const = 0;
  virtual int64_t context() const = 0;  // the most tokens one input may have
  virtual int64_t vocabulary() const = 0;
  virtual Pooling pooling() const = 0;

  // The last layer's rows (before pooling) for one input: tokens.size() x dimensions(). Throws
  // std::out_of_range for an id outside the vocabulary, std::length_error for an empty input or
  // one longer than context().
  virtual std::vector<float> hidden_states(std::span<const TokenId> tokens) const = 0;

  // The input's pooled, unit-length vector.
  std::vector<float> embed(std::span<const TokenId> tokens) const;

  // The tokens llama-embedding feeds for `text`: with the vocabulary's special tokens (BOS, or
  // CLS and SEP), control-token text taken as those tokens.
  std::vector<TokenId> tokenize(std::string_view text) const;

 protected:
  void check_input(std::span<const TokenId> tokens) const;
};

}  // namespace chatflow::engine
