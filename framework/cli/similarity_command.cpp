// chatflow similarity A B: how alike two texts are to an embedder (cosine), and whether the
// semantic cache's verifier takes them for the same question; for choosing a threshold.
#include <iostream>

#include "framework/cache/semantic_index.h"
#include "framework/cli/commands.h"
#include "framework/embedding/embedder.h"

namespace chatflow::cli {

int similarity_command(const SimilarityOptions& options) {
  try {
    auto embedder = options.model.empty() ? embedding::make_ngram_embedder(256, 3)
                                          : embedding::load_model2vec(options.model);
    float similarity =
        embedding::dot(embedder->embed(options.first), embedder->embed(options.second));
    std::printf("%.4f cosine (%s); verifier: %s\n", similarity, embedder->describe().c_str(),
                cache::same_question(options.first, options.second) ? "same question"
                                                                    : "different questions");
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
}

}  // namespace chatflow::cli
