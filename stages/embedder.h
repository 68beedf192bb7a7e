// The `embedder` resource: text to unit vectors for the semantic cache and retrieval, from a
// model2vec model or, with no model, hashed n-grams.
#pragma once

#include <memory>
#include <string>

#include "framework/api/resource.h"
#include "framework/api/text_embedder.h"
#include "framework/embedding/embedder.h"

namespace chatflow {

// Also a TextEmbedder: the server answers POST /v1/embeddings and /v1/rerank with it.
class EmbedderResource final : public Resource, public TextEmbedder {
 public:
  explicit EmbedderResource(std::unique_ptr<embedding::Embedder> embedder)
      : embedder_(std::move(embedder)) {}
  const embedding::Embedder& embedder() const { return *embedder_; }

  size_t embedding_dimensions() const override { return embedder_->dimensions(); }
  std::vector<float> embed_text(std::string_view text) const override {
    return embedder_->embed(text);
  }
  int64_t embedding_token_count(std::string_view text) const override {
    return static_cast<int64_t>(embedder_->token_count(text));
  }

 private:
  std::unique_ptr<embedding::Embedder> embedder_;
};

// The embedder resource `name`, or the default when `name` is empty: hashed n-grams, 256
// dimensions. `Context` is a StageContext or a ResourceContext.
template <class Context>
std::shared_ptr<const embedding::Embedder> embedder_named(Context& context,
                                                          const std::string& name) {
  if (name.empty()) return embedding::make_ngram_embedder(256, 3);
  auto resource = context.template resource<EmbedderResource>(name);
  return std::shared_ptr<const embedding::Embedder>(resource, &resource->embedder());
}

}  // namespace chatflow
