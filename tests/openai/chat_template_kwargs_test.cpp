// The OpenAI body parser's chat_template_kwargs (vLLM's extra chat-template variables): an object
// is kept for the chat template, anything else is a 400 naming the field.
#include <gtest/gtest.h>

#include "framework/openai/openai_protocol.h"

namespace chatflow::openai {
namespace {

TEST(ChatTemplateKwargs, AnObjectIsKeptForTheTemplate) {
  Request request;
  parse_completion_request(
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
          "chat_template_kwargs": {"enable_thinking": false}})",
      RequestKind::chat, request, {"m"});
  EXPECT_EQ(request.chat_template_kwargs, R"({"enable_thinking":false})");
}

TEST(ChatTemplateKwargs, AbsentLeavesItEmpty) {
  Request request;
  parse_completion_request(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})",
                           RequestKind::chat, request, {"m"});
  EXPECT_TRUE(request.chat_template_kwargs.empty());
}

TEST(ChatTemplateKwargs, ANonObjectIsA400NamingIt) {
  Request request;
  try {
    parse_completion_request(
        R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": [1]})",
        RequestKind::chat, request, {"m"});
    ADD_FAILURE() << "accepted";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().status, 400);
    EXPECT_EQ(failure.error().param, "chat_template_kwargs");
  }
}

}  // namespace
}  // namespace chatflow::openai
