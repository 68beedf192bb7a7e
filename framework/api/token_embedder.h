// What an embedding-model resource (a GGUF encoder or decoder run by the engine) offers
// POST /v1/embeddings beyond TextEmbedder: token ids as input, its context and vocabulary for
// checking them, many inputs in one call, and shorter (Matryoshka) vectors where the model was
// trained to keep its meaning in a vector's first entries.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "framework/api/text_embedder.h"

namespace chatflow {

class TokenEmbedder : public TextEmbedder {
 public:
  // The most tokens one input may have, special tokens included.
  virtual int64_t embedding_context() const = 0;
  virtual int64_t embedding_vocabulary() const = 0;
  // The tokens `text` is embedded as (with the model's special tokens).
  virtual std::vector<int32_t> embedding_tokens(std::string_view text) const = 0;
  // The text `ids` stand for, without special tokens: what the gates (input moderation) read for
  // an input sent as token ids. Every id is inside the vocabulary (the caller checks).
  virtual std::string embedding_text(std::span<const int32_t> ids) const = 0;
  // One unit-length vector per input, in order. Each input is non-empty, at most
  // embedding_context() ids, all inside the vocabulary (the caller checks).
  virtual std::vector<std::vector<float>> embed_tokens(
      std::span<const std::vector<int32_t>> inputs) const = 0;
  // The shortest vector a request may ask for ('dimensions'): cut to that length and
  // renormalised. 0: the model's vectors cannot be shortened.
  virtual int64_t shortest_dimensions() const = 0;
};

}  // namespace chatflow
