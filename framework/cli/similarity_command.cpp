// chatflow similarity A B: how alike two texts are to an embedder (cosine), and whether the
// semantic cache's verifier takes them for the same question; for choosing a threshold.
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "framework/cache/semantic_index.h"
#include "framework/cli/command.h"
#include "framework/embedding/embedder.h"

namespace chatflow::cli {
namespace {

struct SimilarityOptions {
  std::string first;
  std::string second;
  std::string model;  // a model2vec directory; empty: hashed n-grams
};

int similarity_command(const SimilarityOptions& options) {
  auto embedder = options.model.empty() ? embedding::make_ngram_embedder(256, 3)
                                        : embedding::load_model2vec(options.model);
  float similarity =
      embedding::dot(embedder->embed(options.first), embedder->embed(options.second));
  std::printf("%.4f cosine (%s); verifier: %s\n", similarity, embedder->describe().c_str(),
              cache::same_question(options.first, options.second) ? "same question"
                                                                  : "different questions");
  return 0;
}

}  // namespace

void add_similarity_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<SimilarityOptions>();
  auto* command = app.add_subcommand(
      "similarity", "Cosine similarity of two texts, as the semantic cache sees them");
  command->add_option("first", options->first)->required();
  command->add_option("second", options->second)->required();
  command->add_option("--model", options->model, "a model2vec directory (default: n-grams)");
  command->callback(
      [&selected, options] { selected = [options] { return similarity_command(*options); }; });
}

}  // namespace chatflow::cli
