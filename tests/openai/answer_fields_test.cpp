// A chunk's reasoning and structured tool calls on the wire: the SSE encoder and the whole
// response send Chunk::reasoning as reasoning_content and Chunk::tool_calls as tool_calls exactly
// as they are, and never read the text for reasoning markers; text is read for calls only when a
// local model writes them there (request.tool_format).
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/openai/openai_protocol.h"

namespace chatflow::openai {
namespace {

namespace json = boost::json;

std::vector<json::object> data_of(const std::string& events) {
  std::vector<json::object> objects;
  size_t position = 0;
  while (position < events.size()) {
    size_t end = events.find("\n\n", position);
    std::string data = events.substr(position + 6, end - position - 6);
    position = end + 2;
    if (data != "[DONE]") objects.push_back(json::parse(data).as_object());
  }
  return objects;
}

void make_chat(Request& request) {
  request.id = "chatcmpl-1";
  request.model = "m";
}

std::string string_of(const json::value& value) {
  return std::string(value.as_string());
}

ToolDefinition tool(std::string name) {
  ToolDefinition definition;
  definition.name = std::move(name);
  definition.parameters = R"({"type": "object"})";
  return definition;
}

// What a client puts together from the stream: reasoning, content, calls, finish reason.
struct Streamed {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  std::string finish;
};

Streamed read_stream(const std::string& events) {
  Streamed streamed;
  for (const auto& object : data_of(events)) {
    const json::object& choice = object.at("choices").at(0).as_object();
    const json::object& delta = choice.at("delta").as_object();
    if (auto* reasoning = delta.if_contains("reasoning_content"))
      streamed.reasoning += reasoning->as_string();
    if (auto* content = delta.if_contains("content")) streamed.content += content->as_string();
    if (auto* calls = delta.if_contains("tool_calls")) {
      for (const auto& call : calls->as_array()) {
        auto index = static_cast<size_t>(call.at("index").as_int64());
        if (call.as_object().contains("id")) {
          EXPECT_EQ(index, streamed.calls.size());
          streamed.calls.push_back({std::string(call.at("id").as_string()),
                                    std::string(call.at("function").at("name").as_string()), ""});
        }
        streamed.calls.at(index).arguments += call.at("function").at("arguments").as_string();
      }
    }
    if (choice.at("finish_reason").is_string())
      streamed.finish = choice.at("finish_reason").as_string();
  }
  return streamed;
}

Chunk reasoning_chunk(std::string reasoning) {
  Chunk chunk;
  chunk.reasoning = std::move(reasoning);
  return chunk;
}

Chunk last_chunk() {
  Chunk chunk;
  chunk.finish = FinishReason::stop;
  return chunk;
}

// Reasoning holding the markers (split across chunks), leading whitespace, content holding call
// markup, reasoning again after the content.
std::vector<Chunk> marked_answer() {
  return {reasoning_chunk("\n\n  The tag </thi"),
          reasoning_chunk("nk> ends <think>a block"),
          Chunk::delta("  Answer <tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"),
          reasoning_chunk(" late </think>"),
          Chunk::delta("</tool_call> done.\n"),
          last_chunk()};
}

const std::string kMarkedReasoning = "\n\n  The tag </think> ends <think>a block late </think>";
const std::string kMarkedContent =
    "  Answer <tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call> done.\n";

TEST(AnswerFields, AStreamSendsReasoningAndContentAsTheyAre) {
  Request request;
  make_chat(request);
  request.generation.tools = {tool("get_time")};  // offered, but no local model writes calls
  SseEncoder encoder;
  std::string events;
  for (const Chunk& chunk : marked_answer())
    events += encoder.encode(request, chunk);
  Streamed streamed = read_stream(events);
  EXPECT_EQ(streamed.reasoning, kMarkedReasoning);
  EXPECT_EQ(streamed.content, kMarkedContent);
  EXPECT_TRUE(streamed.calls.empty());
  EXPECT_EQ(streamed.finish, "stop");
}

TEST(AnswerFields, AWholeAnswerSendsReasoningAndContentAsTheyAre) {
  Request request;
  make_chat(request);
  request.generation.tools = {tool("get_time")};
  WholeAnswer answer;
  for (const Chunk& chunk : marked_answer())
    answer.add(chunk);
  json::object message =
      json::parse(completion_json(request, answer)).at("choices").at(0).at("message").as_object();
  EXPECT_EQ(string_of(message.at("reasoning_content")), kMarkedReasoning);
  EXPECT_EQ(string_of(message.at("content")), kMarkedContent);
  EXPECT_FALSE(message.contains("tool_calls"));
}

TEST(AnswerFields, StructuredCallsAreCallsWithTheirIds) {
  Request request;
  make_chat(request);
  request.generation.tools = {tool("get_weather"), tool("get_time")};
  Chunk calls = Chunk::delta("Checking.");
  calls.tool_calls = {{"call_engine1", "get_weather", R"({"city": "Oslo"})"},
                      {"call_engine2", "get_time", "{}"}};
  std::vector<Chunk> chunks = {reasoning_chunk("Which tools?"), calls, last_chunk()};

  SseEncoder encoder;
  std::string events;
  for (const Chunk& chunk : chunks)
    events += encoder.encode(request, chunk);
  Streamed streamed = read_stream(events);
  EXPECT_EQ(streamed.reasoning, "Which tools?");
  EXPECT_EQ(streamed.content, "Checking.");
  ASSERT_EQ(streamed.calls.size(), 2u);
  EXPECT_EQ(streamed.calls[0].id, "call_engine1");
  EXPECT_EQ(streamed.calls[0].name, "get_weather");
  EXPECT_EQ(streamed.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(streamed.calls[1].id, "call_engine2");
  EXPECT_EQ(streamed.finish, "tool_calls");

  WholeAnswer answer;
  for (const Chunk& chunk : chunks)
    answer.add(chunk);
  json::object choice =
      json::parse(completion_json(request, answer)).at("choices").at(0).as_object();
  EXPECT_EQ(string_of(choice.at("finish_reason")), "tool_calls");
  const json::array& whole_calls = choice.at("message").at("tool_calls").as_array();
  ASSERT_EQ(whole_calls.size(), 2u);
  EXPECT_EQ(string_of(whole_calls[0].at("id")), "call_engine1");
  EXPECT_EQ(string_of(whole_calls[0].at("function").at("arguments")), R"({"city": "Oslo"})");
  EXPECT_EQ(string_of(choice.at("message").at("content")), "Checking.");
}

TEST(AnswerFields, AReasoningModelWithoutReasoningSaysNull) {
  Request request;
  make_chat(request);
  request.reasoning = {true, false};
  WholeAnswer answer;
  answer.add(Chunk::delta("Just the answer."));
  json::object message =
      json::parse(completion_json(request, answer)).at("choices").at(0).at("message").as_object();
  EXPECT_TRUE(message.at("reasoning_content").is_null());
  // Another model's answer has no such field.
  Request plain_request;
  make_chat(plain_request);
  json::object plain = json::parse(completion_json(plain_request, answer))
                           .at("choices")
                           .at(0)
                           .at("message")
                           .as_object();
  EXPECT_FALSE(plain.contains("reasoning_content"));
}

TEST(AnswerFields, TextIsNeverReadForReasoningMarkers) {
  Request request;
  make_chat(request);
  request.reasoning = {true, false};  // the split happened where the text was made
  SseEncoder encoder;
  std::string events = encoder.encode(request, Chunk::delta("<think>not reasoning</think> ok"));
  events += encoder.encode(request, last_chunk());
  Streamed streamed = read_stream(events);
  EXPECT_EQ(streamed.content, "<think>not reasoning</think> ok");
  EXPECT_EQ(streamed.reasoning, "");
}

TEST(AnswerFields, ALocalModelsCallsAreStillReadFromItsText) {
  Request request;
  make_chat(request);
  request.generation.tools = {tool("get_time")};
  request.tool_format = ToolCallFormat::hermes;
  SseEncoder encoder;
  std::string events = encoder.encode(
      request,
      Chunk::delta("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
  events += encoder.encode(request, last_chunk());
  Streamed streamed = read_stream(events);
  ASSERT_EQ(streamed.calls.size(), 1u);
  EXPECT_EQ(streamed.calls[0].name, "get_time");
  EXPECT_EQ(streamed.content, "");
  EXPECT_EQ(streamed.finish, "tool_calls");
}

// A model offered tools that answers in text: the whole answer's content is the streamed one (both
// read by chat::AnswerStream), whitespace around it trimmed as around calls.
TEST(AnswerFields, AWholeAnswerWithoutCallsIsTheContentItsStreamSends) {
  Request request;
  make_chat(request);
  request.generation.tools = {tool("get_time")};
  request.tool_format = ToolCallFormat::hermes;
  std::vector<Chunk> chunks = {Chunk::delta("\n  It is "), Chunk::delta("noon. \n"), last_chunk()};
  SseEncoder encoder;
  std::string events;
  WholeAnswer answer;
  for (const Chunk& chunk : chunks) {
    events += encoder.encode(request, chunk);
    answer.add(chunk);
  }
  EXPECT_EQ(read_stream(events).content, "It is noon.");
  json::object choice =
      json::parse(completion_json(request, answer)).at("choices").at(0).as_object();
  EXPECT_EQ(string_of(choice.at("message").at("content")), "It is noon.");
  EXPECT_EQ(string_of(choice.at("finish_reason")), "stop");
}

}  // namespace
}  // namespace chatflow::openai
