// Anthropic's Messages wire format: request bodies turned into the Request chat completions make,
// and answers written as Anthropic's message and stream events. Expected values are written out by
// hand from Anthropic's API reference.
#include "framework/anthropic/messages_protocol.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace chatflow::anthropic {
namespace {

namespace json = boost::json;

const std::vector<std::string> kModels = {"m"};

RequestError failure_of(std::string_view body) {
  Request request;
  try {
    parse_messages_request(body, request, kModels);
  } catch (const RequestFailure& failure) {
    return failure.error();
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

// The events of a stream: their names and data, checking each data's type is its name.
std::vector<std::pair<std::string, json::object>> events_of(const std::string& stream) {
  std::vector<std::pair<std::string, json::object>> events;
  size_t position = 0;
  while (position < stream.size()) {
    size_t end = stream.find("\n\n", position);
    std::string event = stream.substr(position, end - position);
    position = end + 2;
    size_t newline = event.find('\n');
    std::string name = event.substr(7, newline - 7);                         // "event: NAME"
    json::object data = json::parse(event.substr(newline + 7)).as_object();  // "data: ..."
    EXPECT_EQ(data.at("type").as_string(), name);
    events.emplace_back(name, std::move(data));
  }
  return events;
}

TEST(AnthropicMessages, ARequestBecomesTheChatRequestOfItsConversation) {
  Request request;
  parse_messages_request(R"({
    "model": "m", "max_tokens": 100, "system": [{"type": "text", "text": "Be brief."}],
    "temperature": 0.5, "top_p": 0.9, "top_k": 40, "stop_sequences": ["END"], "stream": true,
    "metadata": {"user_id": "u-1"},
    "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "messages": [
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                        {"type": "text", "text": "Calling."},
                                        {"type": "tool_use", "id": "t1", "name": "f",
                                         "input": {"a": 1}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                    "content": [{"type": "text", "text": "42"}]},
                                   {"type": "tool_result", "tool_use_id": "t2", "content": "no",
                                    "is_error": true},
                                   {"type": "text", "text": "And?"}]}]})",
                         request, kModels);
  EXPECT_EQ(request.kind, RequestKind::chat);
  EXPECT_EQ(request.model, "m");
  EXPECT_EQ(request.generation.max_tokens, 100);
  EXPECT_FLOAT_EQ(request.generation.temperature, 0.5f);
  EXPECT_FLOAT_EQ(request.generation.top_p, 0.9f);
  EXPECT_EQ(request.generation.top_k, 40);
  EXPECT_EQ(request.generation.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(request.stream);
  EXPECT_EQ(request.end_user, "u-1");
  ASSERT_EQ(request.generation.tools.size(), 1u);
  EXPECT_EQ(request.generation.tools[0].parameters, R"({"type":"object"})");
  EXPECT_EQ(request.generation.tool_choice, ToolChoice::required);
  EXPECT_FALSE(request.generation.parallel_tool_calls);
  ASSERT_EQ(request.messages.size(), 6u);
  EXPECT_EQ(request.messages[0].role, "system");
  EXPECT_EQ(request.messages[0].content, "Be brief.");
  EXPECT_EQ(request.messages[1].role, "user");
  EXPECT_EQ(request.messages[2].role, "assistant");
  EXPECT_EQ(request.messages[2].content, "Calling.");  // the replayed thinking is left out
  ASSERT_EQ(request.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(request.messages[2].tool_calls[0].id, "t1");
  EXPECT_EQ(request.messages[2].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(request.messages[3].role, "tool");
  EXPECT_EQ(request.messages[3].tool_call_id, "t1");
  EXPECT_EQ(request.messages[3].content, "42");
  EXPECT_EQ(request.messages[4].content, "Error: no");
  EXPECT_EQ(request.messages[5].role, "user");
  EXPECT_EQ(request.messages[5].content, "And?");
}

TEST(AnthropicMessages, BadRequestsAreRefusedNamingWhatIsWrong) {
  RequestError missing =
      failure_of(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(missing.param, "max_tokens");
  EXPECT_EQ(failure_of(R"({"model": "m", "max_tokens": 0,
                           "messages": [{"role": "user", "content": "x"}]})")
                .param,
            "max_tokens");
  EXPECT_EQ(failure_of(R"({"model": "m", "max_tokens": 5, "messages": []})").param, "messages");
  EXPECT_EQ(failure_of(R"({"model": "m", "max_tokens": 5, "temperature": 1.5,
                           "messages": [{"role": "user", "content": "x"}]})")
                .param,
            "temperature");
  EXPECT_EQ(failure_of(R"({"model": "m", "max_tokens": 5,
                           "messages": [{"role": "system", "content": "x"}]})")
                .param,
            "messages[0].role");
  EXPECT_EQ(failure_of(R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user",
                           "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]})")
                .param,
            "messages[0].content[0].type");
  EXPECT_EQ(failure_of(R"({"model": "m", "max_tokens": 5, "tools": [{"type": "bash_20250124",
                           "name": "bash"}], "messages": [{"role": "user", "content": "x"}]})")
                .param,
            "tools[0].type");
  RequestError unknown = failure_of(R"({"model": "m", "max_tokens": 5, "container": "c",
                                        "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(unknown.param, "container");
  EXPECT_EQ(unknown.code, "unsupported_parameter");
  RequestError model = failure_of(R"({"model": "other", "max_tokens": 5,
                                      "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(model.status, 404);
}

TEST(AnthropicMessages, ACountOfTokensTakesTheConversationAlone) {
  Request request;
  parse_count_tokens_request(R"({"model": "m", "system": "S",
                                 "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                                 "messages": [{"role": "user", "content": "x"}]})",
                             request, kModels);
  ASSERT_EQ(request.messages.size(), 2u);
  EXPECT_EQ(request.messages[0].content, "S");
  EXPECT_EQ(request.generation.tools.size(), 1u);
  // What only generation takes is no part of a count.
  Request counted;
  try {
    parse_count_tokens_request(R"({"model": "m", "max_tokens": 5,
                                   "messages": [{"role": "user", "content": "x"}]})",
                               counted, kModels);
    ADD_FAILURE() << "max_tokens accepted";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().param, "max_tokens");
  }
  EXPECT_EQ(count_tokens_json(42), R"({"input_tokens":42})");
}

TEST(AnthropicMessages, ErrorsComeInAnthropicsShapeWithItsTypes) {
  RequestError error{429, "rate_limit_exceeded", "too many requests", "rate_limited", ""};
  EXPECT_EQ(
      error_json(error),
      R"({"type":"error","error":{"type":"rate_limit_error","message":"too many requests"}})");
  EXPECT_EQ(stream_error_event(error), "event: error\ndata: " + error_json(error) + "\n\n");
  EXPECT_EQ(error_type(400), "invalid_request_error");
  EXPECT_EQ(error_type(401), "authentication_error");
  EXPECT_EQ(error_type(403), "permission_error");
  EXPECT_EQ(error_type(404), "not_found_error");
  EXPECT_EQ(error_type(413), "request_too_large");
  EXPECT_EQ(error_type(415), "invalid_request_error");
  EXPECT_EQ(error_type(500), "api_error");
  EXPECT_EQ(error_type(503), "overloaded_error");
  EXPECT_EQ(error_type(504), "timeout_error");
}

TEST(AnthropicMessages, AnApiKeyHeaderIsABearerCredentialUnlessOneIsGiven) {
  HeaderFields headers = {{"x-api-key", "sk-1"}};
  adopt_api_key(headers);
  EXPECT_EQ(headers.back(), (std::pair<std::string, std::string>{"authorization", "Bearer sk-1"}));
  HeaderFields both = {{"authorization", "Bearer sk-2"}, {"x-api-key", "sk-1"}};
  adopt_api_key(both);
  EXPECT_EQ(both.size(), 2u);
  HeaderFields none = {{"content-type", "application/json"}};
  adopt_api_key(none);
  EXPECT_EQ(none.size(), 1u);
}

TEST(AnthropicMessages, AStreamOpensAndClosesABlockPerPartOfTheAnswer) {
  Request request;
  request.id = "msg_1";
  request.model = "m";
  request.kind = RequestKind::chat;
  request.usage.prompt_tokens = 7;
  Chunk thinking;
  thinking.reasoning = "Hmm.";
  Chunk text = Chunk::delta("Hi");
  Chunk more = Chunk::delta(" there");
  more.tool_calls = {{"call_1", "f", R"({"a": 1})"}};
  Chunk last;
  last.finish = FinishReason::stop;
  last.usage = Usage{7, 4, 0};

  MessagesSseEncoder encoder;
  std::string stream;
  for (const Chunk* chunk : {&thinking, &text, &more, &last})
    stream += encoder.encode(request, *chunk);
  auto events = events_of(stream);
  std::vector<std::string> names;
  for (const auto& [name, data] : events)
    names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "message_start", "ping", "content_block_start", "content_block_delta",
                "content_block_stop", "content_block_start", "content_block_delta",
                "content_block_delta", "content_block_stop", "content_block_start",
                "content_block_delta", "content_block_stop", "message_delta", "message_stop"}));
  const json::object& message = events[0].second.at("message").as_object();
  EXPECT_EQ(message.at("id").as_string(), "msg_1");
  EXPECT_EQ(message.at("usage").at("input_tokens").as_int64(), 7);
  EXPECT_EQ(message.at("usage").at("output_tokens").as_int64(), 0);
  EXPECT_EQ(events[2].second.at("content_block").at("type").as_string(), "thinking");
  EXPECT_EQ(events[3].second.at("delta").at("thinking").as_string(), "Hmm.");
  EXPECT_EQ(events[5].second.at("index").as_int64(), 1);
  EXPECT_EQ(events[5].second.at("content_block").at("type").as_string(), "text");
  EXPECT_EQ(events[6].second.at("delta").at("text").as_string(), "Hi");
  EXPECT_EQ(events[7].second.at("delta").at("text").as_string(), " there");
  const json::object& tool = events[9].second.at("content_block").as_object();
  EXPECT_EQ(events[9].second.at("index").as_int64(), 2);
  EXPECT_EQ(tool.at("type").as_string(), "tool_use");
  EXPECT_EQ(tool.at("id").as_string(), "call_1");
  EXPECT_EQ(tool.at("name").as_string(), "f");
  EXPECT_EQ(events[10].second.at("delta").at("type").as_string(), "input_json_delta");
  EXPECT_EQ(events[10].second.at("delta").at("partial_json").as_string(), R"({"a":1})");
  EXPECT_EQ(events[12].second.at("delta").at("stop_reason").as_string(), "tool_use");
  EXPECT_EQ(events[12].second.at("usage").at("output_tokens").as_int64(), 4);
}

TEST(AnthropicMessages, AWholeMessageHasItsBlocksAndStopReason) {
  Request request;
  request.id = "msg_2";
  request.model = "m";
  request.usage = Usage{5, 3, 0};
  chat::GatheredAnswer answer;
  answer.reasoning = "Think.";
  answer.text = "Done.";
  answer.stop = chat::StopReason::length;
  json::object message = json::parse(message_json(request, answer)).as_object();
  EXPECT_EQ(
      json::serialize(message.at("content")),
      R"([{"type":"thinking","thinking":"Think.","signature":""},{"type":"text","text":"Done."}])");
  EXPECT_EQ(message.at("stop_reason").as_string(), "max_tokens");
  EXPECT_EQ(json::serialize(message.at("usage")), R"({"input_tokens":5,"output_tokens":3})");
  EXPECT_EQ(message.at("type").as_string(), "message");
  EXPECT_EQ(message.at("role").as_string(), "assistant");

  answer = {};
  answer.calls = {{"call_9", "f", "not json"}};
  answer.stop = chat::StopReason::tool_calls;
  message = json::parse(message_json(request, answer)).as_object();
  EXPECT_EQ(json::serialize(message.at("content")),
            R"([{"type":"tool_use","id":"call_9","name":"f","input":{}}])");
  EXPECT_EQ(message.at("stop_reason").as_string(), "tool_use");
}

}  // namespace
}  // namespace chatflow::anthropic
