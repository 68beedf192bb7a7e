// A request's chunks read once into the pieces every wire format writes down: content without the
// calls a model wrote in it, reasoning beside it, whole calls, and why the answer ended. The
// expected values are written out by hand.
#include "framework/chat/answer_stream.h"

#include <gtest/gtest.h>

#include "framework/chat/reasoning_split.h"

namespace chatflow::chat {
namespace {

ToolDefinition tool(std::string name) {
  ToolDefinition definition;
  definition.name = std::move(name);
  definition.parameters = R"({"type": "object"})";
  return definition;
}

void make_chat(Request& request, ToolCallFormat format, std::vector<ToolDefinition> tools) {
  request.kind = RequestKind::chat;
  request.tool_format = format;
  request.generation.tools = std::move(tools);
}

Chunk last_chunk(FinishReason reason = FinishReason::stop) {
  Chunk chunk;
  chunk.finish = reason;
  return chunk;
}

GatheredAnswer gather(const Request& request, const std::vector<Chunk>& chunks) {
  AnswerStream stream;
  GatheredAnswer answer;
  for (const Chunk& chunk : chunks)
    answer.add(stream.push(request, chunk));
  return answer;
}

TEST(AnswerStream, ACallWrittenInTheContentIsTakenOutOfIt) {
  Request request;
  make_chat(request, ToolCallFormat::hermes, {tool("get_weather")});
  // The call arrives cut in the middle of its tag and of its arguments.
  std::vector<Chunk> chunks = {
      Chunk::delta("Let me check.\n<tool_"),
      Chunk::delta("call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Os"),
      Chunk::delta("lo\"}}\n</tool_call>"), last_chunk()};

  AnswerStream stream;
  std::vector<AnswerPiece> pieces;
  for (const Chunk& chunk : chunks)
    pieces.push_back(stream.push(request, chunk));
  // The content is given out before the call, and the call once, whole, when its block closes.
  EXPECT_EQ(pieces[0].text, "Let me check.");
  EXPECT_TRUE(pieces[0].calls.empty());
  EXPECT_TRUE(pieces[1].calls.empty());
  ASSERT_EQ(pieces[2].calls.size(), 1u);
  EXPECT_EQ(pieces[2].calls[0].index, 0);
  EXPECT_EQ(pieces[2].calls[0].name, "get_weather");
  EXPECT_EQ(pieces[2].calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(pieces[2].calls[0].id.substr(0, 5), "call_");
  EXPECT_EQ(pieces[2].calls[0].id.size(), 29u);
  EXPECT_FALSE(pieces[2].stop.has_value());
  EXPECT_EQ(pieces[3].stop, StopReason::tool_calls);

  GatheredAnswer answer = gather(request, chunks);
  EXPECT_EQ(answer.text, "Let me check.");
  ASSERT_EQ(answer.calls.size(), 1u);
  EXPECT_EQ(answer.calls[0].name, "get_weather");
  EXPECT_EQ(answer.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(answer.stop, StopReason::tool_calls);
}

TEST(AnswerStream, JsonNamingNoOfferedFunctionStaysContent) {
  Request request;
  make_chat(request, ToolCallFormat::hermes, {tool("get_weather")});
  GatheredAnswer answer = gather(
      request,
      {Chunk::delta("<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>"), last_chunk()});
  EXPECT_EQ(answer.text, "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>");
  EXPECT_TRUE(answer.calls.empty());
  EXPECT_EQ(answer.stop, StopReason::stop);
}

TEST(AnswerStream, ReasoningIsKeptBesideTheContent) {
  Request request;
  make_chat(request, ToolCallFormat::none, {});
  // What the detokenize stage does to a thinking model's text, then the answer stream.
  ReasoningSplitter splitter(/*open_at_start=*/false);
  std::vector<Chunk> chunks = {Chunk::delta("<think>Two and"), Chunk::delta(" two.</think>"),
                               Chunk::delta("Four."), last_chunk()};
  for (Chunk& chunk : chunks)
    split_reasoning(splitter, chunk);
  GatheredAnswer answer = gather(request, chunks);
  EXPECT_EQ(answer.reasoning, "Two and two.");
  EXPECT_EQ(answer.text, "Four.");
  EXPECT_EQ(answer.stop, StopReason::stop);
}

TEST(AnswerStream, StructuredCallsEndTheAnswerWithToolCalls) {
  Request request;
  make_chat(request, ToolCallFormat::none, {tool("a"), tool("b")});
  Chunk calls = Chunk::delta("Both.");
  calls.tool_calls = {{"call_upstream", "a", "{}"}, {"", "b", R"({"x": 1})"}};
  AnswerStream stream;
  AnswerPiece piece = stream.push(request, calls);
  ASSERT_EQ(piece.calls.size(), 2u);
  EXPECT_EQ(piece.calls[0].index, 0);
  EXPECT_EQ(piece.calls[0].id, "call_upstream");
  EXPECT_EQ(piece.calls[1].index, 1);
  EXPECT_EQ(piece.calls[1].id.substr(0, 5), "call_");  // one is made for a call without
  EXPECT_TRUE(stream.called());
  EXPECT_EQ(stream.push(request, last_chunk()).stop, StopReason::tool_calls);
}

TEST(AnswerStream, CallsWrittenAndStructuredAreNumberedTogether) {
  Request request;
  make_chat(request, ToolCallFormat::hermes, {tool("a"), tool("b")});
  Chunk written =
      Chunk::delta("<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call>");
  Chunk structured;
  structured.tool_calls = {{"call_engine", "b", "{}"}};
  AnswerStream stream;
  AnswerPiece first = stream.push(request, written);
  AnswerPiece second = stream.push(request, structured);
  ASSERT_EQ(first.calls.size(), 1u);
  ASSERT_EQ(second.calls.size(), 1u);
  EXPECT_EQ(first.calls[0].index, 0);
  EXPECT_EQ(second.calls[0].index, 1);

  GatheredAnswer answer = gather(request, {written, structured, last_chunk()});
  ASSERT_EQ(answer.calls.size(), 2u);
  EXPECT_EQ(answer.calls[0].name, "a");
  EXPECT_EQ(answer.calls[0].arguments, R"({"x": 1})");
  EXPECT_EQ(answer.calls[1].name, "b");
  EXPECT_EQ(answer.calls[1].arguments, "{}");
  EXPECT_EQ(answer.stop, StopReason::tool_calls);
}

TEST(AnswerStream, AnAnswerCutByItsLengthEndsWithLengthEvenAfterACall) {
  Request request;
  make_chat(request, ToolCallFormat::hermes, {tool("f")});
  GatheredAnswer cut =
      gather(request, {Chunk::delta("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": "),
                       last_chunk(FinishReason::length)});
  // A call cut in the middle is text, never arguments a client cannot parse.
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.text, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\":");
  EXPECT_EQ(cut.stop, StopReason::length);

  GatheredAnswer filtered =
      gather(request, {Chunk::delta("No."), last_chunk(FinishReason::content_filter)});
  EXPECT_EQ(filtered.stop, StopReason::content_filter);
}

TEST(AnswerStream, ACompletionRequestIsTextOnly) {
  Request request;
  make_chat(request, ToolCallFormat::hermes, {tool("f")});
  request.kind = RequestKind::completion;
  Chunk chunk = Chunk::delta("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  chunk.reasoning = "not for a completion";
  chunk.tool_calls = {{"call_1", "f", "{}"}};
  GatheredAnswer answer = gather(request, {chunk, last_chunk()});
  EXPECT_EQ(answer.text, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  EXPECT_EQ(answer.reasoning, "");
  EXPECT_TRUE(answer.calls.empty());
  EXPECT_EQ(answer.stop, StopReason::stop);
}

TEST(AnswerStream, BrokenUtf8IsRepairedInEachPiece) {
  Request request;
  make_chat(request, ToolCallFormat::none, {});
  Chunk chunk = Chunk::delta("caf\xC3");
  chunk.reasoning = "\xFFok";
  AnswerPiece piece = AnswerStream().push(request, chunk);
  EXPECT_EQ(piece.text, "caf\xEF\xBF\xBD");
  EXPECT_EQ(piece.reasoning, "\xEF\xBF\xBDok");
}

TEST(AnswerStream, StopReasonsHaveOpenAINames) {
  EXPECT_EQ(to_string(StopReason::stop), "stop");
  EXPECT_EQ(to_string(StopReason::length), "length");
  EXPECT_EQ(to_string(StopReason::content_filter), "content_filter");
  EXPECT_EQ(to_string(StopReason::tool_calls), "tool_calls");
}

}  // namespace
}  // namespace chatflow::chat
