// gguf_model's kv_cache.type q8_0: a model whose heads are not whole 32-value blocks is refused
// at the key with the file's line and column, before any request; one whose heads are builds.
#include <gtest/gtest.h>

#include "framework/runtime/pipeline.h"
#include "stages/gguf_model.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

std::string pipeline_with_kv_type(const std::string& model, const std::string& type) {
  return "version: 1\nresources:\n  llm: {type: gguf_model, path: " + model +
         ",\n        kv_cache: {type: " + type +
         "}}\nstages:\n"
         "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
         "  - {name: echo, type: echo}\n";
}

TEST(GgufModelKvCache, Q8_0ForHeadsThatAreNotWholeBlocksIsRefusedAtTheKey) {
  engine::ModelShape shape;
  shape.dim = 64;
  shape.heads = 8;  // head_dim 8, as stories260K's
  shape.kv_heads = 4;
  shape.layers = 1;
  Diagnostics diagnostics;
  auto spec =
      check_yaml(pipeline_with_kv_type(temp_model(shape), "q8_0"), builtin_registry(), diagnostics);
  ASSERT_TRUE(spec) << all_errors(diagnostics);
  EXPECT_FALSE(Pipeline::build(std::move(*spec), diagnostics));
  const std::string errors = all_errors(diagnostics);
  EXPECT_EQ(errors.rfind("test.yaml:4:26: error: resource 'llm' (gguf_model): key "
                         "'kv_cache.type': q8_0 stores each head in blocks of 32 values, and this "
                         "model's heads have 8 (head_dim); use f16 or f32",
                         0),
            0u)
      << errors;
}

TEST(GgufModelKvCache, Q8_0ForHeadsOfWholeBlocksBuilds) {
  engine::ModelShape shape;
  shape.dim = 128;  // four heads of 32
  shape.layers = 1;
  Diagnostics diagnostics;
  auto spec =
      check_yaml(pipeline_with_kv_type(temp_model(shape), "q8_0"), builtin_registry(), diagnostics);
  ASSERT_TRUE(spec) << all_errors(diagnostics);
  EXPECT_TRUE(Pipeline::build(std::move(*spec), diagnostics)) << all_errors(diagnostics);
}

}  // namespace
}  // namespace chatflow::testing
