// What the OpenAI body parser makes of an absent max_tokens: the legacy Completions API (OpenAI's
// and vLLM's CompletionRequest) defaults to 16 tokens; Chat Completions leaves it 0, "not
// given", which the model resolves to what its context leaves.
#include <gtest/gtest.h>

#include "framework/openai/openai_protocol.h"

namespace chatflow::openai {
namespace {

TEST(MaxTokensDefault, ACompletionWithoutMaxTokensGetsSixteen) {
  Request request;
  parse_completion_request(R"({"model": "m", "prompt": "Once upon a time"})",
                           RequestKind::completion, request, {"m"});
  EXPECT_EQ(request.generation.max_tokens, 16);
  Request null_given;
  parse_completion_request(R"({"model": "m", "prompt": "Once upon a time", "max_tokens": null})",
                           RequestKind::completion, null_given, {"m"});
  EXPECT_EQ(null_given.generation.max_tokens, 16);
}

TEST(MaxTokensDefault, ACompletionKeepsTheMaxTokensItGives) {
  Request request;
  parse_completion_request(R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 300})",
                           RequestKind::completion, request, {"m"});
  EXPECT_EQ(request.generation.max_tokens, 300);
}

TEST(MaxTokensDefault, AChatWithoutMaxTokensLeavesItNotGiven) {
  Request request;
  parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})",
                           RequestKind::chat, request, {"m"});
  EXPECT_EQ(request.generation.max_tokens, 0);
  Request capped;
  parse_completion_request(
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 9})",
      RequestKind::chat, capped, {"m"});
  EXPECT_EQ(capped.generation.max_tokens, 9);
}

}  // namespace
}  // namespace chatflow::openai
