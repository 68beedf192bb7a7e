// The `embedder` resource: text to unit vectors for the semantic cache and retrieval, from a
// model2vec model or, with no model, hashed n-grams.
#pragma once

#include <memory>

#include "framework/embedding/embedder.h"
#include "framework/resource.h"

namespace chatflow {

class EmbedderResource final : public Resource {
 public:
  explicit EmbedderResource(std::unique_ptr<embedding::Embedder> embedder)
      : embedder_(std::move(embedder)) {}
  const embedding::Embedder& embedder() const { return *embedder_; }

 private:
  std::unique_ptr<embedding::Embedder> embedder_;
};

}  // namespace chatflow
