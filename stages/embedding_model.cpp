// The `embedding_model` resource: a GGUF embedding model run by the engine (bert, nomic-bert, or a
// llama-family decoder with mean or last-token pooling), answering POST /v1/embeddings (and
// /v1/rerank) under its resource name. See docs/models.md#embedding-models.
#include "framework/engine/embedding_model.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "framework/api/registry.h"
#include "framework/api/token_embedder.h"

namespace chatflow {
namespace {

struct EmbeddingModelConfig {
  std::string path;
  std::string pooling = "auto";
  int matryoshka_min_dimensions = 0;
};

class EmbeddingModelResource final : public Resource, public TokenEmbedder {
 public:
  EmbeddingModelResource(std::unique_ptr<engine::EmbeddingModel> model, int64_t shortest)
      : model_(std::move(model)), shortest_(shortest) {}

  size_t embedding_dimensions() const override { return static_cast<size_t>(model_->dimensions()); }
  // Text longer than the context is cut to it here, for stages that embed through TextEmbedder
  // (a semantic cache's key, a retrieval query); /v1/embeddings and /v1/rerank refuse it
  // instead, through embedding_tokens.
  std::vector<float> embed_text(std::string_view text) const override {
    std::vector<engine::TokenId> tokens = model_->tokenize(text);
    if (static_cast<int64_t>(tokens.size()) > model_->context())
      tokens.resize(static_cast<size_t>(model_->context()));
    return model_->embed(tokens);
  }
  int64_t embedding_token_count(std::string_view text) const override {
    return static_cast<int64_t>(model_->tokenize(text).size());
  }
  int64_t embedding_context() const override { return model_->context(); }
  int64_t embedding_vocabulary() const override { return model_->vocabulary(); }
  std::vector<int32_t> embedding_tokens(std::string_view text) const override {
    return model_->tokenize(text);
  }
  std::string embedding_text(std::span<const int32_t> ids) const override {
    return model_->tokenizer().decode(ids);
  }
  std::vector<std::vector<float>> embed_tokens(
      std::span<const std::vector<int32_t>> inputs) const override {
    std::vector<std::vector<float>> vectors;
    vectors.reserve(inputs.size());
    for (const auto& input : inputs)
      vectors.push_back(model_->embed(input));
    return vectors;
  }
  int64_t shortest_dimensions() const override { return shortest_; }

 private:
  std::unique_ptr<engine::EmbeddingModel> model_;
  int64_t shortest_;
};

ResourceTypeInfo embedding_model_resource_type() {
  ResourceTypeBuilder<EmbeddingModelConfig> type(
      "embedding_model",
      "A GGUF embedding model run by the engine (bert, nomic-bert, or a llama, qwen2 or qwen3 "
      "decoder with mean or last-token pooling): POST /v1/embeddings with `model` set to this "
      "resource's name.");
  type.config().key("path", &EmbeddingModelConfig::path, "the GGUF file").required();
  type.config()
      .key("pooling", &EmbeddingModelConfig::pooling,
           "how token vectors become one: auto (the file's <arch>.pooling_type), mean, cls or "
           "last")
      .choices({"auto", "mean", "cls", "last"});
  type.config()
      .key("matryoshka_min_dimensions", &EmbeddingModelConfig::matryoshka_min_dimensions,
           "the shortest vector a request's `dimensions` may ask for, for models trained with "
           "Matryoshka representation learning (nomic-embed v1.5: 64); 0: never shortened")
      .range(0, 1 << 20);
  type.create([](const EmbeddingModelConfig& config,
                 ResourceContext&) -> std::shared_ptr<Resource> {
    std::unique_ptr<engine::EmbeddingModel> model;
    try {
      model = engine::EmbeddingModel::load(config.path, engine::pooling_from_name(config.pooling));
    } catch (const std::exception& error) {
      throw ConfigError(error.what());
    }
    if (config.matryoshka_min_dimensions > model->dimensions()) {
      throw ConfigError(
          "matryoshka_min_dimensions is " + std::to_string(config.matryoshka_min_dimensions) +
          ", more than the model's " + std::to_string(model->dimensions()) + " dimensions");
    }
    return std::make_shared<EmbeddingModelResource>(std::move(model),
                                                    config.matryoshka_min_dimensions);
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(embedding_model_resource_type);

}  // namespace
}  // namespace chatflow
