// OpenAI's Responses wire format: request bodies turned into the Request chat completions make,
// answers written as response objects and typed stream events, and the store that keeps them per
// owner. Expected values are written out by hand from OpenAI's API reference.
#include "framework/responses/responses_protocol.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace chatflow::responses {
namespace {

namespace json = boost::json;

const std::vector<std::string> kModels = {"m"};

RequestError failure_of(std::string_view body, const ResponseStore& store = ResponseStore(),
                        const std::optional<std::string>& owner = std::string()) {
  Request request;
  try {
    parse_request(body, request, kModels, store, owner);
  } catch (const RequestFailure& failure) {
    return failure.error();
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

// The events of a stream: their names and data, checking each data's type is its name and the
// sequence numbers count from `first`.
std::vector<std::pair<std::string, json::object>> events_of(const std::string& stream,
                                                            int64_t first = 0) {
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
    EXPECT_EQ(data.at("sequence_number").as_int64(), first++);
    events.emplace_back(name, std::move(data));
  }
  return events;
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, json::object>>& events) {
  std::vector<std::string> names;
  for (const auto& [name, data] : events)
    names.push_back(name);
  return names;
}

Chunk text_chunk(std::string text) {
  Chunk chunk;
  chunk.text = std::move(text);
  return chunk;
}

Chunk final_chunk(FinishReason reason, Usage usage = {5, 3, 0}) {
  Chunk chunk;
  chunk.finish = reason;
  chunk.usage = usage;
  return chunk;
}

TEST(ResponsesProtocol, ARequestBecomesTheChatRequestOfItsConversation) {
  Request request;
  ResponseStore store;
  ResponsesRequest parsed = parse_request(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 100, "temperature": 0.5,
    "top_p": 0.9, "stream": true, "user": "u-1", "metadata": {"k": "v"},
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": "required", "parallel_tool_calls": false,
    "input": [
      {"role": "user", "content": "Hi"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "Calling.", "annotations": []}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}",
       "id": "fc_1", "status": "completed"},
      {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "42"},
      {"type": "function_call_output", "call_id": "c2",
       "output": [{"type": "input_text", "text": "no"}]},
      {"role": "developer", "content": [{"type": "input_text", "text": "Mind"},
                                        {"type": "input_text", "text": "the gap"}]}]})",
                                          request, kModels, store, std::string());
  EXPECT_EQ(request.kind, RequestKind::chat);
  EXPECT_EQ(request.model, "m");
  EXPECT_EQ(request.generation.max_tokens, 100);
  EXPECT_FLOAT_EQ(request.generation.temperature, 0.5f);
  EXPECT_FLOAT_EQ(request.generation.top_p, 0.9f);
  EXPECT_TRUE(request.stream);
  EXPECT_EQ(request.end_user, "u-1");
  ASSERT_EQ(request.generation.tools.size(), 1u);
  EXPECT_EQ(request.generation.tools[0].parameters, R"({"type":"object"})");
  EXPECT_TRUE(request.generation.tools[0].strict) << "Responses functions are strict by default";
  EXPECT_EQ(request.generation.tool_choice, ToolChoice::required);
  EXPECT_FALSE(request.generation.parallel_tool_calls);
  ASSERT_EQ(request.messages.size(), 6u);
  EXPECT_EQ(request.messages[0].role, "system");
  EXPECT_EQ(request.messages[0].content, "Be brief.");
  EXPECT_EQ(request.messages[1].role, "user");
  EXPECT_EQ(request.messages[1].content, "Hi");
  // The assistant's text and the calls after it are one turn; the reasoning is left out.
  EXPECT_EQ(request.messages[2].role, "assistant");
  EXPECT_EQ(request.messages[2].content, "Calling.");
  ASSERT_EQ(request.messages[2].tool_calls.size(), 2u);
  EXPECT_EQ(request.messages[2].tool_calls[0].id, "c1");
  EXPECT_EQ(request.messages[2].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(request.messages[2].tool_calls[1].id, "c2");
  EXPECT_EQ(request.messages[3].role, "tool");
  EXPECT_EQ(request.messages[3].tool_call_id, "c1");
  EXPECT_EQ(request.messages[3].content, "42");
  EXPECT_EQ(request.messages[4].content, "no");
  EXPECT_EQ(request.messages[5].role, "system");
  EXPECT_EQ(request.messages[5].content, "Mind\nthe gap");
  // The kept conversation is the same without the instructions.
  ASSERT_EQ(parsed.conversation.size(), 5u);
  EXPECT_EQ(parsed.conversation[0].content, "Hi");
  EXPECT_TRUE(parsed.store);
  EXPECT_EQ(parsed.echo.at("instructions").as_string(), "Be brief.");
  EXPECT_EQ(parsed.echo.at("tool_choice").as_string(), "required");
  EXPECT_EQ(parsed.echo.at("metadata").as_object().at("k").as_string(), "v");
}

TEST(ResponsesProtocol, AStringInputIsOneUserMessage) {
  Request request;
  ResponseStore store;
  parse_request(R"({"model": "m", "input": "Tell me"})", request, kModels, store, std::string());
  ASSERT_EQ(request.messages.size(), 1u);
  EXPECT_EQ(request.messages[0].role, "user");
  EXPECT_EQ(request.messages[0].content, "Tell me");
  EXPECT_FALSE(request.stream);
  EXPECT_EQ(request.generation.max_tokens, 0) << "absent: the model's bound";
  EXPECT_EQ(request.generation.tool_choice, ToolChoice::none);
}

TEST(ResponsesProtocol, TextFormatBecomesTheResponseFormatChatCompletionsEnforce) {
  Request request;
  ResponseStore store;
  ResponsesRequest parsed = parse_request(R"({"model": "m", "input": "x",
    "text": {"format": {"type": "json_schema", "name": "p", "strict": true,
                        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})",
                                          request, kModels, store, std::string());
  EXPECT_EQ(request.generation.response_format.kind, ResponseFormat::Kind::json_schema);
  EXPECT_EQ(request.generation.response_format.name, "p");
  EXPECT_EQ(request.generation.response_format.schema,
            R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  EXPECT_TRUE(request.generation.response_format.strict);
  EXPECT_EQ(parsed.echo.at("text").at("format").at("name").as_string(), "p");

  Request object;
  parse_request(R"({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}})",
                object, kModels, store, std::string());
  EXPECT_EQ(object.generation.response_format.kind, ResponseFormat::Kind::json_object);
}

TEST(ResponsesProtocol, WhatTheServerDoesNotDoIsRefusedByName) {
  struct Case {
    const char* body;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {R"({"model": "m"})", "input", ""},
      {R"({"model": "m", "input": 1})", "input", ""},
      {R"({"model": "m", "input": []})", "input", ""},
      {R"({"input": "x"})", "model", ""},
      {R"({"model": "m", "input": "x", "tools": [{"type": "web_search_preview"}]})",
       "tools[0].type", "unsupported_tool"},
      {R"({"model": "m", "input": "x", "tool_choice": {"type": "mcp"}})", "tool_choice.type",
       "unsupported_tool"},
      {R"({"model": "m", "input": "x", "tool_choice": "required"})", "tool_choice", ""},
      {R"({"model": "m", "input": "x", "background": true})", "background",
       "unsupported_parameter"},
      {R"({"model": "m", "input": "x", "include": ["reasoning.encrypted_content"]})", "include[0]",
       "unsupported_parameter"},
      {R"({"model": "m", "input": "x", "truncation": "auto"})", "truncation",
       "unsupported_parameter"},
      {R"({"model": "m", "input": "x", "reasoning": {"effort": "low"}})", "reasoning",
       "unsupported_parameter"},
      {R"({"model": "m", "input": "x", "prompt": {"id": "p"}})", "prompt", "unsupported_parameter"},
      {R"({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]})",
       "input[0].content[0].type", "unsupported_content"},
      {R"({"model": "m", "input": [{"role": "assistant", "content": [{"type": "input_text"}]}]})",
       "input[0].content[0].type", "unsupported_content"},
      {R"({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]})", "input[0].type",
       "unsupported_content"},
      {R"({"model": "m", "input": [{"role": "tool", "content": "x"}]})", "input[0].role", ""},
      {R"({"model": "m", "input": [{"type": "function_call", "call_id": "c"}]})", "input[0].name",
       ""},
      {R"({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n",
           "schema": {"type": "integer", "multipleOf": 2}}}})",
       "text.format.schema", "unsupported_schema"},
      {R"({"model": "m", "input": "x", "text": {"verbosity": "low"}})", "text.verbosity",
       "unsupported_parameter"},
      {R"({"model": "m", "input": "x", "temperature": 3})", "temperature", ""},
      {R"({"model": "m", "input": "x", "metadata": {"k": 1}})", "metadata.k", ""},
  };
  for (const Case& test : cases) {
    RequestError error = failure_of(test.body);
    EXPECT_EQ(error.status, 400) << test.body;
    EXPECT_EQ(error.type, "invalid_request_error") << test.body;
    EXPECT_EQ(error.param, test.param) << test.body << ": " << error.message;
    EXPECT_EQ(error.code, test.code) << test.body << ": " << error.message;
  }
  RequestError unknown = failure_of(R"({"model": "gpt-none", "input": "x"})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.code, "model_not_found");
}

TEST(ResponsesProtocol, PreviousResponseIdStartsFromTheKeptConversationOfItsOwnerOnly) {
  ResponseStore store;
  store.put("acme\nuser:alice", "resp_1", "{}",
            {Message("user", "Hi"), Message("assistant", "Hello")});
  Request request;
  ResponsesRequest parsed = parse_request(
      R"({"model": "m", "instructions": "Now", "previous_response_id": "resp_1", "input": "More"})",
      request, kModels, store, std::string("acme\nuser:alice"));
  ASSERT_EQ(request.messages.size(), 4u);
  EXPECT_EQ(request.messages[0].content, "Now");
  EXPECT_EQ(request.messages[1].content, "Hi");
  EXPECT_EQ(request.messages[2].content, "Hello");
  EXPECT_EQ(request.messages[3].content, "More");
  ASSERT_EQ(parsed.conversation.size(), 3u);
  EXPECT_EQ(parsed.echo.at("previous_response_id").as_string(), "resp_1");

  RequestError other = failure_of(R"({"model": "m", "previous_response_id": "resp_1",
                                      "input": "x"})",
                                  store, std::string("acme\nuser:bob"));
  EXPECT_EQ(other.status, 400);
  EXPECT_EQ(other.code, "previous_response_not_found");
  EXPECT_EQ(other.param, "previous_response_id");
}

TEST(ResponsesProtocol, ACallerWhoOwnsNothingCanKeepNothing) {
  ResponseStore store;
  Request request;
  ResponsesRequest parsed =
      parse_request(R"({"model": "m", "input": "x"})", request, kModels, store, std::nullopt);
  EXPECT_FALSE(parsed.store);
  EXPECT_FALSE(parsed.echo.at("store").as_bool());
  RequestError asked =
      failure_of(R"({"model": "m", "input": "x", "store": true})", store, std::nullopt);
  EXPECT_EQ(asked.code, "no_response_owner");
  EXPECT_EQ(owner_of(false, Identity{}), std::optional<std::string>(""));
  EXPECT_EQ(owner_of(true, Identity{"acme", "", "", {}, {}}), std::nullopt);
  EXPECT_EQ(owner_of(true, Identity{"acme", "alice", "", {}, {}}),
            std::optional<std::string>("acme\nuser:alice"));
}

// A writer for a request parsed from `body`, with the request's id and model set as the server
// sets them.
struct Written {
  Request request;
  std::shared_ptr<ResponseStore> kept = std::make_shared<ResponseStore>();
  ResponseStore& store = *kept;
  std::unique_ptr<ResponseWriter> writer;
  explicit Written(std::string_view body, bool stream) {
    std::string text(body);
    if (stream) text.insert(text.size() - 1, R"(, "stream": true)");
    ResponsesRequest parsed = parse_request(text, request, kModels, store, std::string("o"));
    request.id = "resp_0123";
    request.created = 1700000000;
    writer = std::make_unique<ResponseWriter>(std::move(parsed), kept, std::string("o"));
  }
};

TEST(ResponsesProtocol, AStreamIsTheDocumentedEventsInOrder) {
  Written written(R"({"model": "m", "input": "x", "max_output_tokens": 3})", true);
  Request& request = written.request;
  std::string stream = written.writer->push(request, text_chunk("Once"));
  stream += written.writer->push(request, text_chunk(" upon"));
  stream += written.writer->push(request, final_chunk(FinishReason::length));
  auto events = events_of(stream);
  EXPECT_EQ(names_of(events),
            (std::vector<std::string>{"response.created", "response.in_progress",
                                      "response.output_item.added", "response.content_part.added",
                                      "response.output_text.delta", "response.output_text.delta",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.incomplete"}));
  const json::object& created = events[0].second.at("response").as_object();
  EXPECT_EQ(created.at("id").as_string(), "resp_0123");
  EXPECT_EQ(created.at("status").as_string(), "in_progress");
  EXPECT_TRUE(created.at("output").as_array().empty());
  EXPECT_TRUE(created.at("usage").is_null());
  const json::object& added = events[2].second.at("item").as_object();
  EXPECT_EQ(added.at("id").as_string(), "msg_0123_0");
  EXPECT_EQ(added.at("status").as_string(), "in_progress");
  EXPECT_EQ(events[4].second.at("delta").as_string(), "Once");
  EXPECT_EQ(events[4].second.at("item_id").as_string(), "msg_0123_0");
  EXPECT_EQ(events[4].second.at("output_index").as_int64(), 0);
  EXPECT_EQ(events[4].second.at("content_index").as_int64(), 0);
  EXPECT_EQ(events[6].second.at("text").as_string(), "Once upon");
  const json::object& done = events[8].second.at("item").as_object();
  EXPECT_EQ(done.at("status").as_string(), "incomplete");
  EXPECT_EQ(done.at("content").as_array()[0].at("text").as_string(), "Once upon");
  const json::object& last = events[9].second.at("response").as_object();
  EXPECT_EQ(last.at("status").as_string(), "incomplete");
  EXPECT_EQ(last.at("incomplete_details").at("reason").as_string(), "max_output_tokens");
  EXPECT_EQ(last.at("output").as_array().size(), 1u);
  EXPECT_EQ(last.at("output").as_array()[0].as_object(), done);
  EXPECT_EQ(last.at("usage").at("input_tokens").as_int64(), 5);
  EXPECT_EQ(last.at("usage").at("output_tokens").as_int64(), 3);
  EXPECT_EQ(last.at("usage").at("total_tokens").as_int64(), 8);
  EXPECT_EQ(last.at("max_output_tokens").as_int64(), 3);
  // Kept at the last event, as the client may ask for it at once.
  auto kept = written.store.response_json("o", "resp_0123");
  ASSERT_TRUE(kept);
  EXPECT_EQ(json::parse(*kept).as_object(), last);
  auto conversation = written.store.conversation("o", "resp_0123");
  ASSERT_TRUE(conversation);
  ASSERT_EQ(conversation->size(), 2u);
  EXPECT_EQ((*conversation)[1].role, "assistant");
  EXPECT_EQ((*conversation)[1].content, "Once upon");
}

TEST(ResponsesProtocol, ReasoningAndCallsAreItemsOfTheirOwn) {
  Written written(R"({"model": "m", "input": "x",
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]})",
                  true);
  Request& request = written.request;
  Chunk thinking;
  thinking.reasoning = "hmm";
  std::string stream = written.writer->push(request, thinking);
  stream += written.writer->push(request, text_chunk("Sure."));
  Chunk called;
  called.tool_calls.push_back({"call_1", "f", R"({"a":1})"});
  called.finish = FinishReason::stop;
  called.usage = Usage{4, 2, 0};
  stream += written.writer->push(request, called);
  auto events = events_of(stream);
  EXPECT_EQ(
      names_of(events),
      (std::vector<std::string>{
          "response.created", "response.in_progress", "response.output_item.added",
          "response.content_part.added", "response.reasoning_text.delta",
          "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
          "response.output_item.added", "response.content_part.added", "response.output_text.delta",
          "response.output_text.done", "response.content_part.done", "response.output_item.done",
          "response.output_item.added", "response.function_call_arguments.delta",
          "response.function_call_arguments.done", "response.output_item.done",
          "response.completed"}));
  const json::array& output = events.back().second.at("response").at("output").as_array();
  ASSERT_EQ(output.size(), 3u);
  EXPECT_EQ(output[0].at("type").as_string(), "reasoning");
  EXPECT_EQ(output[0].at("id").as_string(), "rs_0123_0");
  EXPECT_EQ(output[0].at("content").as_array()[0].at("text").as_string(), "hmm");
  EXPECT_EQ(output[1].at("type").as_string(), "message");
  EXPECT_EQ(output[1].at("content").as_array()[0].at("text").as_string(), "Sure.");
  EXPECT_EQ(output[2].at("type").as_string(), "function_call");
  EXPECT_EQ(output[2].at("id").as_string(), "fc_0123_2");
  EXPECT_EQ(output[2].at("call_id").as_string(), "call_1");
  EXPECT_EQ(output[2].at("name").as_string(), "f");
  EXPECT_EQ(output[2].at("arguments").as_string(), R"({"a":1})");
  EXPECT_EQ(output[2].at("status").as_string(), "completed");
  EXPECT_EQ(events[15].second.at("delta").as_string(), R"({"a":1})");
  EXPECT_EQ(events[15].second.at("item_id").as_string(), "fc_0123_2");
  EXPECT_EQ(events[15].second.at("output_index").as_int64(), 2);
  // The kept conversation has the answer and its call, not the reasoning.
  auto conversation = written.store.conversation("o", "resp_0123");
  ASSERT_TRUE(conversation);
  ASSERT_EQ(conversation->back().role, "assistant");
  EXPECT_EQ(conversation->back().content, "Sure.");
  ASSERT_EQ(conversation->back().tool_calls.size(), 1u);
  EXPECT_EQ(conversation->back().tool_calls[0].id, "call_1");
}

TEST(ResponsesProtocol, AWholeResponseIsTheObjectTheStreamEndsWith) {
  Written streamed(R"({"model": "m", "input": "x", "store": false})", true);
  std::string stream = streamed.writer->push(streamed.request, text_chunk("Hi"));
  stream += streamed.writer->push(streamed.request, final_chunk(FinishReason::stop));
  json::object last = events_of(stream).back().second.at("response").as_object();

  Written whole(R"({"model": "m", "input": "x", "store": false})", false);
  whole.writer->push(whole.request, text_chunk("Hi"));
  whole.writer->push(whole.request, final_chunk(FinishReason::stop));
  json::object response = json::parse(whole.writer->finish(whole.request)).as_object();
  EXPECT_EQ(response, last);
  EXPECT_EQ(response.at("object").as_string(), "response");
  EXPECT_EQ(response.at("status").as_string(), "completed");
  EXPECT_TRUE(response.at("incomplete_details").is_null());
  EXPECT_TRUE(response.at("error").is_null());
  EXPECT_EQ(response.at("created_at").as_int64(), 1700000000);
  EXPECT_FALSE(response.at("store").as_bool());
  EXPECT_EQ(response.at("output").at(0).at("content").at(0).at("text").as_string(), "Hi");
  EXPECT_EQ(response.at("text").at("format").at("type").as_string(), "text");
  EXPECT_EQ(response.at("tool_choice").as_string(), "auto");
  EXPECT_EQ(whole.store.size(), 0u) << "store: false";
}

TEST(ResponsesProtocol, AnEmptyAnswerIsOneEmptyMessage) {
  Written whole(R"({"model": "m", "input": "x"})", false);
  whole.writer->push(whole.request, final_chunk(FinishReason::stop));
  json::object response = json::parse(whole.writer->finish(whole.request)).as_object();
  ASSERT_EQ(response.at("output").as_array().size(), 1u);
  EXPECT_EQ(response.at("output").at(0).at("type").as_string(), "message");
  EXPECT_EQ(response.at("output").at(0).at("content").at(0).at("text").as_string(), "");
  EXPECT_EQ(whole.store.size(), 1u) << "kept by default";
}

TEST(ResponsesProtocol, AFailedStreamEndsWithTheErrorEventNumberedAfterTheOthers) {
  Written streamed(R"({"model": "m", "input": "x"})", true);
  std::string stream = streamed.writer->push(streamed.request, text_chunk("Hi"));
  size_t count = events_of(stream).size();
  auto error = events_of(streamed.writer->stream_error(
                             {504, "timeout", "the request ran too long", "request_timeout", ""}),
                         static_cast<int64_t>(count));
  ASSERT_EQ(error.size(), 1u);
  EXPECT_EQ(error[0].first, "error");
  EXPECT_EQ(error[0].second.at("code").as_string(), "request_timeout");
  EXPECT_EQ(error[0].second.at("message").as_string(), "the request ran too long");
  EXPECT_TRUE(error[0].second.at("param").is_null());
  EXPECT_FALSE(error[0].second.contains("error")) << "the SDK would read that as the error body";
  EXPECT_EQ(streamed.store.size(), 0u) << "an unfinished response is not kept";
}

TEST(ResponseStore, KeepsPerOwnerAndForgetsTheOldestBeyondItsBounds) {
  ResponseStore store(2, 1 << 20);
  store.put("a", "r1", "{1}", {});
  store.put("b", "r1", "{b}", {});
  EXPECT_EQ(store.response_json("a", "r1"), std::optional<std::string>("{1}"));
  EXPECT_EQ(store.response_json("b", "r1"), std::optional<std::string>("{b}"));
  EXPECT_FALSE(store.response_json("c", "r1"));
  store.put("a", "r2", "{2}", {});
  EXPECT_EQ(store.size(), 2u);
  EXPECT_FALSE(store.response_json("a", "r1")) << "the oldest goes first";
  EXPECT_TRUE(store.response_json("a", "r2"));
  EXPECT_FALSE(store.erase("b", "r2"));
  EXPECT_TRUE(store.erase("a", "r2"));
  EXPECT_FALSE(store.response_json("a", "r2"));

  ResponseStore small(100, 600);
  small.put("a", "r1", std::string(300, 'x'), {});
  small.put("a", "r2", std::string(300, 'y'), {});
  EXPECT_FALSE(small.response_json("a", "r1")) << "over the byte bound";
  EXPECT_TRUE(small.response_json("a", "r2"));
  EXPECT_LE(small.bytes(), 600u);
  small.erase("a", "r2");
  EXPECT_EQ(small.bytes(), 0u);
}

}  // namespace
}  // namespace chatflow::responses
