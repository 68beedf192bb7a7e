// What an embedder resource offers the HTTP server (POST /v1/embeddings, POST /v1/rerank): text to
// vectors, outside any request's pipeline. The server finds it among a built pipeline's resources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace chatflow {

class TextEmbedder {
 public:
  virtual ~TextEmbedder() = default;
  virtual size_t embedding_dimensions() const = 0;
  virtual std::vector<float> embed_text(std::string_view text) const = 0;
  // The tokens (or words, for an embedder without a vocabulary) of `text` the vector is made of.
  virtual int64_t embedding_token_count(std::string_view text) const = 0;
};

}  // namespace chatflow
