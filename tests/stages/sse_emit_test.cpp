// The sse_emit stage: each chunk gets the bytes the client receives (Chunk::encoded), as the
// OpenAI API streams them: chat.completion.chunk events (the assistant role first, the finish
// reason on an empty delta) or text_completion events, a usage event only when the request asked
// for one, then [DONE]. Chunks come from a scripted stream stage, so each event can be checked
// against what went in; the first test streams the real model's answer.
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"
#include "support/scripted_stream.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {
namespace json = boost::json;

std::string model_path() {
  engine::ModelShape shape;  // the writer's defaults otherwise
  shape.ffn = 96;
  shape.context = 256;
  shape.type = kernels::TensorType::q8_0;
  return temp_model(shape);
}

// The data of each event in `wire`, which must be nothing but "data: ...\n\n" events.
std::vector<std::string> events_of(const std::string& wire) {
  std::vector<std::string> events;
  for (size_t start = 0; start < wire.size();) {
    size_t end = wire.find("\n\n", start);
    EXPECT_NE(end, std::string::npos) << wire;
    EXPECT_EQ(wire.compare(start, 6, "data: "), 0) << wire;
    if (end == std::string::npos) break;
    events.push_back(wire.substr(start + 6, end - start - 6));
    start = end + 2;
  }
  return events;
}

std::string wire_of(const std::vector<Chunk>& chunks) {
  std::string wire;
  for (const auto& chunk : chunks)
    wire += chunk.encoded;
  return wire;
}

json::object object_of(const std::string& event) {
  return json::parse(event).as_object();
}

json::object first_choice(const std::string& event) {
  return object_of(event).at("choices").as_array().at(0).as_object();
}

Chunk text_chunk(std::string text) {
  return Chunk::delta(std::move(text));
}

Chunk final_chunk(FinishReason reason, std::optional<Usage> usage = std::nullopt) {
  Chunk last;
  last.finish = reason;
  last.usage = usage;
  return last;
}

std::unique_ptr<Pipeline> scripted_pipeline() {
  return build_yaml(
      "version: 1\nstages:\n  - {name: script, type: scripted_stream}\n"
      "  - {name: emit, type: sse_emit}\n",
      registry_with_scripted_stream());
}

struct Played {
  std::shared_ptr<Request> request;
  std::vector<std::string> events;
};

Played play(Pipeline& pipeline, StreamScript script, RequestKind kind = RequestKind::chat,
            const std::function<void(Request&)>& prepare = {}) {
  auto sink = std::make_shared<CollectingSink>();
  auto request = std::make_shared<Request>();
  request->kind = kind;
  request->id = kind == RequestKind::chat ? "chatcmpl-7" : "cmpl-7";
  request->model = "tiny";
  request->created = 1700000000;
  if (kind == RequestKind::chat) {
    request->messages.push_back({"user", "hi"});
  } else {
    request->prompt = "hi";
  }
  request->sink = sink;
  if (prepare) prepare(*request);
  attach_script(*request, std::move(script));
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return {request, events_of(wire_of(sink->chunks()))};
}

// The model's own answer through the model stages: the role first, the content deltas, the
// finish reason on an empty delta, the usage event and [DONE].
TEST(SseEmit, TheModelsAnswerStreamsAsChatCompletionChunks) {
  auto pipeline =
      build_yaml("version: 1\nresources:\n  llm: {type: gguf_model, path: \"" + model_path() +
                     "\"}\nstages:\n"
                     "  - {name: tokenize, type: tokenize, config: {model: llm}}\n"
                     "  - {name: prefill, type: prefill, config: {model: llm}}\n"
                     "  - {name: decode, type: decode, config: {model: llm}}\n"
                     "  - {name: detokenize, type: detokenize, config: {model: llm}}\n"
                     "  - {name: emit, type: sse_emit}\n",
                 builtin_registry());
  ASSERT_TRUE(pipeline);
  auto sink = std::make_shared<CollectingSink>();
  auto request = std::make_shared<Request>();
  request->id = "chatcmpl-1";
  request->model = "tiny";
  request->created = 1700000000;
  request->include_usage = true;
  request->messages.push_back({"user", "say something"});
  request->generation.temperature = 0;
  request->generation.max_tokens = 6;
  request->generation.ignore_eos = true;
  request->sink = sink;
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  std::vector<std::string> events = events_of(wire_of(sink->chunks()));
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  auto first = object_of(events[0]);
  EXPECT_EQ(first.at("object"), "chat.completion.chunk");
  EXPECT_EQ(first.at("id"), "chatcmpl-1");
  EXPECT_EQ(first.at("created"), 1700000000);
  EXPECT_TRUE(first.at("usage").is_null());
  EXPECT_EQ(first_choice(events[0]).at("delta").as_object().at("role"), "assistant");
  std::string content;
  for (size_t i = 1; i + 3 < events.size(); ++i) {
    auto choice = first_choice(events[i]);
    EXPECT_TRUE(choice.at("finish_reason").is_null());
    content += json::value_to<std::string>(choice.at("delta").as_object().at("content"));
  }
  EXPECT_EQ(content, sink->text());
  auto last_choice = first_choice(events[events.size() - 3]);
  EXPECT_EQ(last_choice.at("finish_reason"), "length");
  EXPECT_TRUE(last_choice.at("delta").as_object().empty());
  auto usage_chunk = object_of(events[events.size() - 2]);
  EXPECT_TRUE(usage_chunk.at("choices").as_array().empty());
  EXPECT_EQ(usage_chunk.at("usage").as_object().at("completion_tokens"), 6);
  EXPECT_EQ(usage_chunk.at("usage").as_object().at("prompt_tokens"),
            static_cast<int64_t>(request->prompt_tokens.size()));
}

TEST(SseEmit, ACompletionStreamsTextCompletionObjectsWithoutARoleEvent) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  Played played = play(
      *pipeline, {{text_chunk("Hello"), text_chunk(" world"), final_chunk(FinishReason::stop)}},
      RequestKind::completion);
  ASSERT_EQ(played.events.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    auto object = object_of(played.events[i]);
    EXPECT_EQ(object.at("object"), "text_completion");
    EXPECT_EQ(object.at("id"), "cmpl-7");
    EXPECT_EQ(object.at("model"), "tiny");
    EXPECT_FALSE(object.contains("usage")) << "usage was not asked for";
  }
  EXPECT_EQ(first_choice(played.events[0]).at("text"), "Hello");
  EXPECT_TRUE(first_choice(played.events[0]).at("finish_reason").is_null());
  EXPECT_EQ(first_choice(played.events[1]).at("text"), " world");
  EXPECT_EQ(first_choice(played.events[2]).at("text"), "");
  EXPECT_EQ(first_choice(played.events[2]).at("finish_reason"), "stop");
  EXPECT_EQ(played.events[3], "[DONE]");
}

// stream_options.include_usage: "usage": null on every event and one more event, with no
// choices, holding the last chunk's usage; without it no event mentions usage.
TEST(SseEmit, UsageIsStreamedOnlyWhenTheRequestAsksForIt) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  StreamScript script{{text_chunk("ok"), final_chunk(FinishReason::stop, Usage{9, 2, 4})}, {}};
  Played without = play(*pipeline, script);
  ASSERT_EQ(without.events.size(), 4u);  // role, "ok", finish, [DONE]
  for (size_t i = 0; i + 1 < without.events.size(); ++i)
    EXPECT_FALSE(object_of(without.events[i]).contains("usage")) << without.events[i];

  Played with = play(*pipeline, script, RequestKind::chat,
                     [](Request& request) { request.include_usage = true; });
  ASSERT_EQ(with.events.size(), 5u);  // role, "ok", finish, usage, [DONE]
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(object_of(with.events[i]).at("usage").is_null()) << with.events[i];
  auto usage_event = object_of(with.events[3]);
  EXPECT_TRUE(usage_event.at("choices").as_array().empty());
  EXPECT_EQ(usage_event.at("usage"),
            json::parse(R"({"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11,)"
                        R"( "prompt_tokens_details": {"cached_tokens": 4}})"));
  EXPECT_EQ(with.events[4], "[DONE]");
}

TEST(SseEmit, ReasoningIsSentAsReasoningContent) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  Chunk thinking;
  thinking.reasoning = "let me see";
  Played played = play(*pipeline, {{thinking, text_chunk("42"), final_chunk(FinishReason::stop)}});
  ASSERT_EQ(played.events.size(), 5u);
  EXPECT_EQ(first_choice(played.events[1]).at("delta"),
            json::parse(R"({"reasoning_content": "let me see"})"));
  EXPECT_EQ(first_choice(played.events[2]).at("delta"), json::parse(R"({"content": "42"})"));
}

// Calls an engine made whole (Chunk::tool_calls) go out as tool_calls deltas, and an answer
// that made calls finishes with "tool_calls".
TEST(SseEmit, StructuredToolCallsAreSentAsToolCallsAndFinishAsToolCalls) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  Chunk call;
  call.tool_calls.push_back({"call_1", "get_weather", R"({"city":"Oslo"})"});
  Played played = play(*pipeline, {{call, final_chunk(FinishReason::stop)}});
  ASSERT_EQ(played.events.size(), 4u);
  EXPECT_EQ(first_choice(played.events[1]).at("delta"),
            json::parse(R"({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",)"
                        R"( "function": {"arguments": "{\"city\":\"Oslo\"}",)"
                        R"( "name": "get_weather"}}]})"));
  EXPECT_EQ(first_choice(played.events[2]).at("finish_reason"), "tool_calls");
}

// prompt_assembly's citations ride on the first event only, under "chatflow".
TEST(SseEmit, CitationsGoOnTheFirstEventOnly) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  Played played = play(*pipeline, {{text_chunk("see [1]"), final_chunk(FinishReason::stop)}},
                       RequestKind::chat, [](Request& request) {
                         request.citations.push_back({"text", "handbook/leave", "Leave", 2, 0.5});
                       });
  ASSERT_EQ(played.events.size(), 4u);
  EXPECT_EQ(object_of(played.events[0]).at("chatflow"),
            json::parse(R"({"citations": [{"index": 1, "document": "handbook/leave",)"
                        R"( "title": "Leave", "chunk": 2, "text": "text"}]})"));
  EXPECT_FALSE(object_of(played.events[1]).contains("chatflow"));
  EXPECT_FALSE(object_of(played.events[2]).contains("chatflow"));
}

// A stream that fails after it began: the events already encoded stay as they were and the stage
// writes no [DONE]; the error event is the sink's to write (the server's, from the request's
// error), so that a client never reads a failed answer as complete.
TEST(SseEmit, AStreamThatFailsGetsNoDoneEvent) {
  auto pipeline = scripted_pipeline();
  ASSERT_TRUE(pipeline);
  Played played =
      play(*pipeline, {{text_chunk("partial")},
                       RequestError{500, "server_error", "the engine failed", "engine_error", {}}});
  ASSERT_TRUE(played.request->error());
  EXPECT_EQ(played.request->error()->code, "engine_error");
  ASSERT_EQ(played.events.size(), 2u);
  EXPECT_EQ(first_choice(played.events[1]).at("delta"), json::parse(R"({"content": "partial"})"));
  for (const auto& event : played.events)
    EXPECT_NE(event, "[DONE]");
}

TEST(SseEmit, TakesNoConfiguration) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nstages:\n  - {name: echo, type: echo}\n"
      "  - {name: emit, type: sse_emit, config: {format: openai}}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_NE(errors.find("test.yaml:4:"), std::string::npos) << errors;
  EXPECT_NE(errors.find("stage 'emit' (sse_emit): unknown key 'format' (known keys: none)"),
            std::string::npos)
      << errors;
}

}  // namespace
}  // namespace chatflow::testing
