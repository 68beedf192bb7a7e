// The embedding_model resource (stages/embedding_model.cpp): built from YAML on make-model files,
// it is the TokenEmbedder /v1/embeddings finds, its vectors are the engine's, text past the
// context is cut for rerank, and bad configuration is refused at its key with the reason.
#include "framework/engine/embedding_model.h"

#include <gtest/gtest.h>

#include "framework/api/token_embedder.h"
#include "framework/engine/model_writer.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

std::string bert_file() {
  static const std::string path = [] {
    engine::ModelShape shape;
    shape.architecture = "bert";
    shape.dim = 32;
    shape.heads = 4;
    shape.kv_heads = 4;
    shape.layers = 1;
    shape.ffn = 64;
    shape.context = 16;
    std::string file = temp_path("stage-bert.gguf");
    engine::write_random_model(shape, file);
    return file;
  }();
  return path;
}

std::string pipeline(const std::string& resource) {
  return "version: 1\nresources:\n  vectors: {type: embedding_model, " + resource +
         "}\nstages:\n  - {name: echo, type: echo}\n";
}

TEST(EmbeddingModelResource, IsATokenEmbedderWithTheEnginesVectors) {
  auto built = build_yaml(pipeline("path: " + bert_file() + ", matryoshka_min_dimensions: 8"),
                          builtin_registry());
  ASSERT_TRUE(built);
  auto resource = built->resource("vectors");
  const auto* embedder = dynamic_cast<const TokenEmbedder*>(resource.get());
  ASSERT_NE(embedder, nullptr);
  EXPECT_EQ(embedder->embedding_dimensions(), 32u);
  EXPECT_EQ(embedder->embedding_context(), 16);
  EXPECT_EQ(embedder->shortest_dimensions(), 8);
  auto engine_model = engine::EmbeddingModel::load(bert_file());
  std::vector<int32_t> tokens = embedder->embedding_tokens("hello world");
  EXPECT_EQ(tokens, engine_model->tokenize("hello world"));
  EXPECT_EQ(embedder->embedding_token_count("hello world"), 4);  // [CLS] hello world [SEP]
  std::vector<std::vector<int32_t>> batch{tokens, engine_model->tokenize("the cat")};
  auto vectors = embedder->embed_tokens(batch);
  ASSERT_EQ(vectors.size(), 2u);
  EXPECT_EQ(vectors[0], engine_model->embed(batch[0]));
  EXPECT_EQ(vectors[1], engine_model->embed(batch[1]));
  EXPECT_EQ(embedder->embed_text("hello world"), vectors[0]);
  // TextEmbedder's callers (rerank) get text past the context cut to it rather than an error.
  std::string long_text;
  for (int i = 0; i < 40; ++i)
    long_text += "cat ";
  std::vector<int32_t> cut = embedder->embedding_tokens(long_text);
  ASSERT_GT(cut.size(), 16u);
  cut.resize(16);
  EXPECT_EQ(embedder->embed_text(long_text), engine_model->embed(cut));
}

TEST(EmbeddingModelResource, PoolingKeyOverridesTheFile) {
  auto built = build_yaml(pipeline("path: " + bert_file() + ", pooling: cls"), builtin_registry());
  ASSERT_TRUE(built);
  const auto* embedder = dynamic_cast<const TokenEmbedder*>(built->resource("vectors").get());
  ASSERT_NE(embedder, nullptr);
  auto cls = engine::EmbeddingModel::load(bert_file(), engine::Pooling::cls);
  std::vector<int32_t> tokens = embedder->embedding_tokens("the weather");
  EXPECT_EQ(embedder->embed_tokens({{tokens}})[0], cls->embed(tokens));
  EXPECT_EQ(embedder->shortest_dimensions(), 0);
}

std::string build_errors(const std::string& resource) {
  Diagnostics diagnostics;
  auto spec = check_yaml(pipeline(resource), builtin_registry(), diagnostics);
  if (!spec) return all_errors(diagnostics);
  EXPECT_FALSE(Pipeline::build(std::move(*spec), diagnostics));
  return all_errors(diagnostics);
}

TEST(EmbeddingModelResource, BadConfigurationIsRefusedWithTheReason) {
  EXPECT_NE(build_errors("pooling: mean").find("'path'"), std::string::npos);
  EXPECT_NE(build_errors("path: " + bert_file() + ", pooling: max").find("pooling"),
            std::string::npos);
  std::string too_long = build_errors("path: " + bert_file() + ", matryoshka_min_dimensions: 64");
  EXPECT_NE(too_long.find("more than the model's 32 dimensions"), std::string::npos) << too_long;
  engine::ModelShape decoder;
  decoder.dim = 32;
  decoder.layers = 1;
  decoder.ffn = 64;
  std::string no_pooling = build_errors("path: " + temp_model(decoder));
  EXPECT_NE(no_pooling.find("llama.pooling_type"), std::string::npos) << no_pooling;
  std::string missing = build_errors("path: /nonexistent/model.gguf");
  EXPECT_NE(missing.find("/nonexistent/model.gguf"), std::string::npos) << missing;
}

}  // namespace
}  // namespace chatflow::testing
