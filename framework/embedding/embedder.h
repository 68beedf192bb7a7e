// Text to vector, for the semantic cache (and retrieval): unit-length vectors, so the inner
// product is the cosine similarity.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::embedding {

class Embedder {
 public:
  virtual ~Embedder() = default;
  virtual size_t dimensions() const = 0;
  // L2-normalised (all zeros for text with nothing to embed).
  virtual std::vector<float> embed(std::string_view text) const = 0;
  virtual std::string describe() const = 0;
  // The pieces of `text` its vector is made of: the model's tokens, else its words.
  virtual size_t token_count(std::string_view text) const;
};

// A model2vec static embedding model: model.safetensors ("embeddings", with "mapping" and
// "weights" when vocabulary-quantised), tokenizer.json and config.json in `directory`. Token
// vectors are mean-pooled, as the reference implementation does (at most 512 tokens, unknown
// tokens left out), then normalised when config.json says so. Throws std::runtime_error.
std::unique_ptr<Embedder> load_model2vec(const std::string& directory);

// Needs no model: word and character n-grams (of the normalised text) hashed into `dimensions`
// signed buckets. Paraphrases that share most words and spellings land close; good enough for
// a cache that verifies its hits, and the default when no model is configured.
std::unique_ptr<Embedder> make_ngram_embedder(size_t dimensions, int n);

// By name: "ngrams" (`dimensions`, `n`) or "model2vec" (`path`). Throws std::runtime_error.
std::unique_ptr<Embedder> make_embedder(const std::string& kind, const std::string& path,
                                        size_t dimensions, int n);

// Inner product of two vectors of equal length.
float dot(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace chatflow::embedding
