// A cached answer as Redis keeps it: every chunk's text, reasoning and tool calls come back as
// they were stored, and a value of another layout (an older chatflow's, whose text held the
// reasoning inside "<think>" markers) is refused, which the stores read as a miss.
#include "framework/cache/answer_codec.h"

#include <stdexcept>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace chatflow::cache {
namespace {

CachedAnswer answer_with_fields() {
  CachedAnswer answer;
  Chunk reasoning;
  reasoning.reasoning = "\n\n  The tag </think> ends <tool_call> nothing";
  Chunk text = Chunk::delta("  Answer: <tool_call>{\"name\": \"x\"}</tool_call>\n");
  Chunk call;
  call.tool_calls = {{"call_engine", "get_weather", R"({"city": "Oslo"})"},
                     {"call_2", "get_time", "{}"}};
  answer.chunks = {reasoning, text, call};
  answer.finish = FinishReason::stop;
  answer.usage = {12, 7, 4};
  answer.tenant = "acme";
  answer.model = "m";
  answer.conversation = "digest";
  answer.citations = {{"Dragons hoard gold.", "bestiary.md", "The Bestiary", 3, 0.5}};
  answer.tool_format = ToolCallFormat::hermes;
  return answer;
}

TEST(AnswerCodec, EveryChunkFieldComesBackAsStored) {
  CachedAnswer stored = answer_with_fields();
  auto expires = std::chrono::steady_clock::now();
  auto read = decode_answer(encode_answer(stored), expires);
  ASSERT_EQ(read->chunks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(read->chunks[i].text, stored.chunks[i].text) << i;
    EXPECT_EQ(read->chunks[i].reasoning, stored.chunks[i].reasoning) << i;
    ASSERT_EQ(read->chunks[i].tool_calls.size(), stored.chunks[i].tool_calls.size()) << i;
    for (size_t c = 0; c < stored.chunks[i].tool_calls.size(); ++c) {
      EXPECT_EQ(read->chunks[i].tool_calls[c].id, stored.chunks[i].tool_calls[c].id);
      EXPECT_EQ(read->chunks[i].tool_calls[c].name, stored.chunks[i].tool_calls[c].name);
      EXPECT_EQ(read->chunks[i].tool_calls[c].arguments, stored.chunks[i].tool_calls[c].arguments);
    }
  }
  EXPECT_EQ(read->finish, FinishReason::stop);
  EXPECT_EQ(read->usage.prompt_tokens, 12);
  EXPECT_EQ(read->usage.completion_tokens, 7);
  EXPECT_EQ(read->usage.cached_prompt_tokens, 4);
  EXPECT_EQ(read->tenant, "acme");
  EXPECT_EQ(read->conversation, "digest");
  ASSERT_EQ(read->citations.size(), 1u);
  EXPECT_EQ(read->citations[0].document, "bestiary.md");
  EXPECT_EQ(read->tool_format, ToolCallFormat::hermes);
  EXPECT_EQ(read->expires, expires);
}

TEST(AnswerCodec, AValueOfTheOldLayoutIsRefused) {
  // What chatflow wrote before chunks had fields: text only, the reasoning inside it.
  std::string old = R"({"chunks": ["<think>plan</think>", "answer"], "finish": 0,
    "usage": {"prompt": 1, "completion": 2, "cached_prompt": 0}, "tenant": "acme", "model": "m",
    "conversation": "d", "citations": [], "reasoning": {"enabled": true, "open_at_start": false},
    "tool_format": 0})";
  EXPECT_THROW(decode_answer(old, {}), std::runtime_error);
  // The current layout marked with another format number is refused too.
  boost::json::object value = boost::json::parse(encode_answer(answer_with_fields())).as_object();
  EXPECT_EQ(value.at("format").as_int64(), kAnswerFormat);
  value["format"] = kAnswerFormat + 1;
  EXPECT_THROW(decode_answer(boost::json::serialize(value), {}), std::runtime_error);
}

TEST(AnswerCodec, AChunkOfTheWrongShapeIsRefused) {
  boost::json::object value = boost::json::parse(encode_answer(answer_with_fields())).as_object();
  value["chunks"] = boost::json::array{boost::json::object{{"text", 1}}};
  EXPECT_THROW(decode_answer(boost::json::serialize(value), {}), std::runtime_error);
  value["chunks"] = boost::json::array{
      boost::json::object{{"text", ""}, {"tool_calls", boost::json::array{"not a call"}}}};
  EXPECT_THROW(decode_answer(boost::json::serialize(value), {}), std::runtime_error);
}

}  // namespace
}  // namespace chatflow::cache
