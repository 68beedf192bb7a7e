// The real stories260K model against llama.cpp's recorded behaviour (../shared/models/
// stories260K/SOURCE.txt): "Once upon a time" tokenizes to [1, 403, 407, 261, 378] and greedy
// decoding continues with exactly ", there was a little girl named Lily. She loved to play".
#include <gtest/gtest.h>

#include "framework/engine/generator.h"
#include "support/shared_data.h"

namespace chatflow::engine {
namespace {

TEST(Stories260K, PromptTokenizesAsLlamaCppDoes) {
  CHATFLOW_REQUIRE_SHARED(path, "models/stories260K/stories260K.gguf");
  auto model = Model::load(path);
  EXPECT_EQ(model->tokenizer().encode("Once upon a time", true),
            (std::vector<TokenId>{1, 403, 407, 261, 378}));
}

TEST(Stories260K, GreedyContinuationMatchesLlamaCpp) {
  CHATFLOW_REQUIRE_SHARED(path, "models/stories260K/stories260K.gguf");
  auto model = Model::load(path);
  for (int threads : {1, 2}) {
    Generator generator(model, threads);
    GenerationRequest request;
    request.prompt = model->tokenizer().encode("Once upon a time", true);
    request.sampling.temperature = 0;
    request.max_tokens = 16;
    auto result = generator.generate(request);
    EXPECT_EQ(result.text, ", there was a little girl named Lily. She loved to play")
        << threads << " threads";
    EXPECT_EQ(result.tokens.size(), 16u);
    EXPECT_EQ(result.reason, StopReason::length);
  }
}

}  // namespace
}  // namespace chatflow::engine
