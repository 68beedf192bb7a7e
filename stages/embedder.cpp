// embedder: see embedder.h.
#include "stages/embedder.h"

#include "framework/api/registry.h"

namespace chatflow {
namespace {

struct EmbedderConfig {
  std::string kind = "ngrams";
  std::string path;
  int dimensions = 256;
  int n = 3;
};

ResourceTypeInfo embedder_resource_type() {
  ResourceTypeBuilder<EmbedderConfig> type(
      "embedder",
      "Text to unit vectors: a model2vec model (safetensors + tokenizer.json), or "
      "hashed word and character n-grams when there is no model.");
  type.config()
      .key("kind", &EmbedderConfig::kind, "model2vec or ngrams")
      .choices({"model2vec", "ngrams"});
  type.config().key("path", &EmbedderConfig::path, "the model2vec model's directory");
  type.config()
      .key("dimensions", &EmbedderConfig::dimensions, "ngrams: vector length")
      .range(16, 4096);
  type.config().key("n", &EmbedderConfig::n, "ngrams: characters per n-gram").range(2, 8);
  type.create([](const EmbedderConfig& config, ResourceContext&) -> std::shared_ptr<Resource> {
    if (config.kind == "model2vec") {
      if (config.path.empty())
        throw ConfigError("kind model2vec needs 'path' (the model's directory)");
      try {
        return std::make_shared<EmbedderResource>(embedding::load_model2vec(config.path));
      } catch (const std::runtime_error& error) {
        throw ConfigError(error.what());
      }
    }
    return std::make_shared<EmbedderResource>(
        embedding::make_ngram_embedder(static_cast<size_t>(config.dimensions), config.n));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(embedder_resource_type);

}  // namespace
}  // namespace chatflow
