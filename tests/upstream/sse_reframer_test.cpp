#include "framework/upstream/sse_reframer.h"

#include <gtest/gtest.h>

namespace chatflow::upstream {
namespace {

std::vector<StreamEvent> push_all(SseReframer& reframer, std::string_view bytes) {
  return reframer.push(bytes);
}

// A stream as vLLM writes it: the role first, content deltas, the finish reason, the usage
// event (stream_options.include_usage), then [DONE].
constexpr std::string_view kChatStream =
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}"
    "\n\n"
    "data: "
    "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Once\"},\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" "
    "upon\"},\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,"
    "\"total_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n"
    "data: [DONE]\n\n";

TEST(SseReframer, ReadsContentFinishUsageAndDone) {
  SseReframer reframer;
  auto events = push_all(reframer, kChatStream);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_FALSE(events[0].has_output()) << "the role event carries no text";
  EXPECT_EQ(events[1].content, "Once");
  EXPECT_EQ(events[2].content, " upon");
  EXPECT_EQ(events[3].finish_reason, "length");
  ASSERT_TRUE(events[4].usage);
  EXPECT_EQ(events[4].usage->prompt_tokens, 7);
  EXPECT_EQ(events[4].usage->completion_tokens, 2);
  EXPECT_EQ(events[4].usage->cached_prompt_tokens, 4);
  EXPECT_EQ(events[5].kind, StreamEvent::Kind::done);
  EXPECT_TRUE(reframer.ended());
}

TEST(SseReframer, SameEventsWhateverTheByteBoundaries) {
  for (size_t piece : {1u, 2u, 3u, 7u, 64u}) {
    SseReframer reframer;
    std::string content;
    int done = 0;
    for (size_t at = 0; at < kChatStream.size(); at += piece) {
      for (const auto& event : reframer.push(kChatStream.substr(at, piece))) {
        content += event.content;
        done += event.kind == StreamEvent::Kind::done;
      }
    }
    EXPECT_EQ(content, "Once upon") << "pieces of " << piece;
    EXPECT_EQ(done, 1) << "pieces of " << piece;
  }
}

TEST(SseReframer, CrLfLinesCommentsAndOtherFields) {
  SseReframer reframer;
  auto events = reframer.push(
      ": keep-alive\r\n\r\nevent: message\r\nid: 3\r\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].content, "hi");
}

TEST(SseReframer, DataLinesOfOneEventJoin) {
  SseReframer reframer;
  auto events = reframer.push("data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"x\"}}]}\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::delta);
  EXPECT_EQ(events[0].content, "x");
}

TEST(SseReframer, ReasoningUnderEitherName) {
  SseReframer reframer;
  auto events = reframer.push(
      "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"reasoning\":\"more\"}}]}\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].reasoning, "think");
  EXPECT_EQ(events[1].reasoning, "more");
  EXPECT_TRUE(events[1].has_output());
}

TEST(SseReframer, ToolCallPieces) {
  SseReframer reframer;
  auto events = reframer.push(
      "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
      "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
      "\"{\\\"city\\\": \"}}]}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\","
      "\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}"
      "\n\n");
  ASSERT_EQ(events.size(), 3u);
  ASSERT_EQ(events[0].tool_calls.size(), 1u);
  EXPECT_EQ(events[0].tool_calls[0].id, "call_1");
  EXPECT_EQ(events[0].tool_calls[0].name, "get_weather");
  EXPECT_EQ(events[1].tool_calls[0].index, 0);
  EXPECT_EQ(events[1].tool_calls[0].arguments, "{\"city\": ");
  EXPECT_EQ(events[2].tool_calls[0].index, 1);
  EXPECT_EQ(events[2].tool_calls[0].name, "now");
  EXPECT_EQ(events[2].finish_reason, "tool_calls");
}

TEST(SseReframer, TextCompletionEvents) {
  SseReframer reframer;
  auto events = reframer.push(
      "data: {\"object\":\"text_completion\",\"choices\":[{\"text\":\"abc\",\"index\":0,"
      "\"finish_reason\":null}]}\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].content, "abc");
}

TEST(SseReframer, ErrorObjectEndsTheStream) {
  SseReframer reframer;
  auto events = reframer.push(
      "data: {\"error\":{\"message\":\"engine overloaded\",\"type\":\"server_error\"}}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n");
  ASSERT_EQ(events.size(), 1u) << "nothing is read after an error";
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::error);
  EXPECT_EQ(events[0].error, "engine overloaded");
}

TEST(SseReframer, NotJsonIsAnError) {
  SseReframer reframer;
  auto events = reframer.push("data: {oops\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::error);
  EXPECT_NE(events[0].error.find("{oops"), std::string::npos) << events[0].error;
}

TEST(SseReframer, AnEventWithoutEndIsBounded) {
  SseReframer reframer;
  std::string line = "data: " + std::string(SseReframer::kMaxEventBytes + 1, 'x');
  auto events = reframer.push(line);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::error);
}

TEST(SseReframer, NothingAfterDone) {
  SseReframer reframer;
  auto events =
      reframer.push("data: [DONE]\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, StreamEvent::Kind::done);
}

TEST(ErrorMessageOf, ReadsTheShapesEnginesAnswerWith) {
  EXPECT_EQ(error_message_of(R"({"error":{"message":"model not found","code":404}})"),
            "model not found");
  EXPECT_EQ(error_message_of(R"({"error":"Input validation error"})"), "Input validation error");
  EXPECT_EQ(error_message_of(R"({"object":"error","message":"bad","code":400})"), "bad");
  EXPECT_EQ(error_message_of("Bad Gateway\n"), "Bad Gateway ");
  EXPECT_EQ(error_message_of(""), "(no body)");
}

}  // namespace
}  // namespace chatflow::upstream
