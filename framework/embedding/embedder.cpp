#include "framework/embedding/embedder.h"

#include <stdexcept>

namespace chatflow::embedding {

std::unique_ptr<Embedder> make_embedder(const std::string& kind, const std::string& path,
                                        size_t dimensions, int n) {
  if (kind == "model2vec") {
    if (path.empty()) throw std::runtime_error("a model2vec embedder needs its model's directory");
    return load_model2vec(path);
  }
  if (kind == "ngrams") return make_ngram_embedder(dimensions, n);
  throw std::runtime_error("unknown embedder '" + kind + "': expected ngrams or model2vec");
}

size_t Embedder::token_count(std::string_view text) const {
  size_t words = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words;
}

}  // namespace chatflow::embedding
