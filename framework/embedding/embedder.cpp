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

}  // namespace chatflow::embedding
