// The echo stage, through a pipeline built from the built-in registry as a user would.
#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"

namespace chatflow::testing {
namespace {

std::vector<std::string> texts(const std::vector<Chunk>& chunks) {
  std::vector<std::string> result;
  for (const auto& chunk : chunks)
    result.push_back(chunk.text);
  return result;
}

TEST(EchoStage, StreamsTheLastUserMessageWordByWord) {
  auto pipeline =
      build_yaml("version: 1\nstages:\n  - {name: echo, type: echo}\n", builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("ignored", sink);
  request->messages.push_back({"assistant", "not this"});
  request->messages.push_back({"user", "hello  big\nworld "});
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(texts(sink->chunks()),
            (std::vector<std::string>{"hello", "  big", "\nworld", " ", ""}));
  EXPECT_EQ(sink->text(), "hello  big\nworld ");
  EXPECT_EQ(request->finish_reason(), FinishReason::stop);
}

TEST(EchoStage, PrefixAndWordsPerChunk) {
  auto pipeline = build_yaml(
      "version: 1\nstages:\n  - {name: echo, type: echo, config: {prefix: 'You said: ', "
      "words_per_chunk: 3}}\n",
      builtin_registry());
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  ASSERT_EQ(pipeline->submit(user_request("one two three four", sink)), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  EXPECT_EQ(texts(sink->chunks()),
            (std::vector<std::string>{"You said: one", " two three four", ""}));
}

TEST(EchoStage, RequestWithoutUserMessageIsA400) {
  auto pipeline =
      build_yaml("version: 1\nstages:\n  - {name: echo, type: echo}\n", builtin_registry());
  ASSERT_TRUE(pipeline);
  auto request = std::make_shared<Request>();
  request->messages.push_back({"system", "be brief"});
  auto sink = std::make_shared<CollectingSink>();
  request->sink = sink;
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(request->error());
  EXPECT_EQ(request->error()->status, 400);
  EXPECT_EQ(request->error()->type, "invalid_request_error");
}

}  // namespace
}  // namespace chatflow::testing
