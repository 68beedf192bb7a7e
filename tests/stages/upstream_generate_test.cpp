// The upstream_generate stage against an OpenAI-compatible engine written here: a loopback HTTP
// server that keeps what it was sent and streams the server-sent events each test chose. The
// engine's text deltas, finish reason and usage become the request's; it is held to max_tokens
// even when it writes more; what it is asked is the request's answer; and its refusals and
// failures become the request's errors. (tests/fleet/upstream.test.mjs runs it over HTTP against
// real chatflow engines.)
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "support/pipeline_helpers.h"
#include "support/recording_http_server.h"

namespace chatflow::testing {
namespace {
namespace json = boost::json;

std::string event(const std::string& data) {
  return "data: " + data + "\n\n";
}

std::string content(const std::string& text) {
  return event(R"({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": )"
               R"({"content": )" +
               json::serialize(json::value(text)) + R"(}, "finish_reason": null}]})");
}

std::string finish(const std::string& reason) {
  return event(R"({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, )"
               R"("finish_reason": ")" +
               reason + R"("}]})");
}

std::string usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return event(R"({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": )" +
               std::to_string(prompt_tokens) + R"(, "completion_tokens": )" +
               std::to_string(completion_tokens) + "}}");
}

const std::string kDone = "data: [DONE]\n\n";

// The head of a 200 answer whose stream ends when the connection closes.
const std::string kStreamHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

// An engine that answers every request with `stream`'s events, or `answer` as a whole HTTP
// response, or as `respond` writes it piece by piece; and the pipeline that generates through it.
struct Engine {
  std::string stream;
  std::string answer;
  std::function<void(const RecordingServer::Write&)> respond;
  RecordingServer server{[this](const RecordedRequest&, const RecordingServer::Write& write) {
    if (respond) return respond(write);
    write(answer.empty() ? http_response(200, "text/event-stream", stream) : answer);
  }};
  std::unique_ptr<Pipeline> pipeline = build_yaml(
      "version: 1\nresources:\n  engine: {type: upstream, endpoints: [\"" + server.url() +
          "\"], model: engine-model, retries: 0, health: {path: \"\"}}\n"
          "stages:\n  - {name: generate, type: upstream_generate, config: {model: "
          "engine}}\n",
      builtin_registry());
};

// Until `sink` holds `count` chunks (or 20 s passed): the engine then knows its output was read.
void wait_for_chunks(const CollectingSink& sink, size_t count) {
  for (int i = 0; i < 20000 && sink.chunks().size() < count; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

struct Answer {
  std::shared_ptr<Request> request;
  std::vector<Chunk> chunks;
  std::string text;
};

Answer ask(Engine& engine, const std::function<void(Request&)>& prepare = {},
           std::shared_ptr<CollectingSink> sink = std::make_shared<CollectingSink>()) {
  auto request = std::make_shared<Request>();
  request->messages.push_back({"user", "hi there"});
  request->sink = sink;
  request->generation.max_tokens = 10;
  if (prepare) prepare(*request);
  EXPECT_TRUE(engine.pipeline);
  if (!engine.pipeline) return {request, {}, {}};
  EXPECT_EQ(engine.pipeline->submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return {request, sink->chunks(), sink->text()};
}

std::vector<std::string> texts_of(const std::vector<Chunk>& chunks) {
  std::vector<std::string> texts;
  for (const auto& chunk : chunks)
    if (!chunk.text.empty()) texts.push_back(chunk.text);
  return texts;
}

// Each event read on its own (the engine waits until its output arrived) is a chunk, in order.
TEST(UpstreamGenerate, TheEnginesTextDeltasAreTheAnswersChunksInOrder) {
  Engine engine;
  auto sink = std::make_shared<CollectingSink>();
  engine.respond = [&sink](const RecordingServer::Write& write) {
    write(kStreamHead);
    size_t written = 0;
    for (const char* text : {"Hel", "lo", " world"}) {
      write(content(text));
      wait_for_chunks(*sink, ++written);
    }
    write(finish("stop") + kDone);
  };
  Answer answer = ask(engine, {}, sink);
  ASSERT_FALSE(answer.request->error()) << answer.request->error()->message;
  EXPECT_EQ(texts_of(answer.chunks), (std::vector<std::string>{"Hel", "lo", " world"}));
  EXPECT_EQ(answer.request->finish_reason(), FinishReason::stop);
  EXPECT_EQ(answer.request->annotation("upstream"), engine.server.url());
}

// Events that arrive together are passed on together: the same text in one chunk.
TEST(UpstreamGenerate, EventsReadTogetherAreOneChunkOfTheSameText) {
  Engine engine;
  engine.stream = content("Hel") + content("lo") + content(" world") + finish("stop") + kDone;
  Answer answer = ask(engine);
  ASSERT_FALSE(answer.request->error()) << answer.request->error()->message;
  EXPECT_EQ(answer.text, "Hello world");
  EXPECT_EQ(answer.request->finish_reason(), FinishReason::stop);
}

TEST(UpstreamGenerate, TheEnginesFinishReasonIsTheAnswers) {
  for (auto [reason, expected] : {std::pair{"length", FinishReason::length},
                                  std::pair{"content_filter", FinishReason::content_filter},
                                  std::pair{"stop", FinishReason::stop}}) {
    Engine engine;
    engine.stream = content("a") + finish(reason) + kDone;
    Answer answer = ask(engine);
    ASSERT_FALSE(answer.request->error()) << answer.request->error()->message;
    EXPECT_EQ(answer.request->finish_reason(), expected) << reason;
  }
}

TEST(UpstreamGenerate, TheEnginesUsageIsTheRequests) {
  Engine engine;
  engine.stream = content("Hello") + finish("stop") + usage(7, 3) + kDone;
  Answer answer = ask(engine);
  ASSERT_FALSE(answer.request->error()) << answer.request->error()->message;
  EXPECT_EQ(answer.request->usage.prompt_tokens, 7);
  EXPECT_EQ(answer.request->usage.completion_tokens, 3);
}

// No usage event and no tokenizer: a token per 4 bytes (and per event) of the answer, and of the
// prompt's messages plus 4 per message: "hi there" is 8 bytes, "Hel" "lo" " world" 11 in 3 events.
TEST(UpstreamGenerate, WithoutTheEnginesUsageTheTokensAreEstimated) {
  Engine engine;
  engine.stream = content("Hel") + content("lo") + content(" world") + finish("stop") + kDone;
  Answer answer = ask(engine);
  ASSERT_FALSE(answer.request->error()) << answer.request->error()->message;
  EXPECT_EQ(answer.request->usage.prompt_tokens, 2 + 4);
  EXPECT_EQ(answer.request->usage.completion_tokens, 3);
}

// An engine that writes past max_tokens (each short event a token) is cut there: the answer
// ends with "length" and counts max_tokens, whatever the engine says it spent.
TEST(UpstreamGenerate, AnEngineIgnoringMaxTokensIsCutAtIt) {
  Engine engine;
  for (const char* word : {"one ", "two ", "three ", "four ", "five ", "six "})
    engine.stream += content(word);
  engine.stream += finish("stop") + usage(7, 6) + kDone;
  Answer answer = ask(engine, [](Request& request) { request.generation.max_tokens = 3; });
  ASSERT_FALSE(answer.request->error()) << answer.request->error()->message;
  EXPECT_EQ(answer.text, "one two three ");
  EXPECT_EQ(answer.request->finish_reason(), FinishReason::length);
  EXPECT_EQ(answer.request->usage.completion_tokens, 3);
}

TEST(UpstreamGenerate, TheEngineIsAskedForTheRequestsAnswerAsAStreamWithUsage) {
  Engine engine;
  engine.stream = content("ok") + finish("stop") + kDone;
  ask(engine, [](Request& request) {
    request.generation.max_tokens = 5;
    request.generation.temperature = 0;
  });
  auto requests = engine.server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].target, "/v1/chat/completions");
  json::object body = json::parse(requests[0].body).as_object();
  EXPECT_EQ(body.at("model"), "engine-model");
  EXPECT_EQ(body.at("stream"), true);
  EXPECT_EQ(body.at("stream_options"), json::parse(R"({"include_usage": true})"));
  EXPECT_EQ(body.at("max_tokens"), 5);
  EXPECT_EQ(body.at("temperature").to_number<double>(), 0.0);
  EXPECT_EQ(body.at("messages"), json::parse(R"([{"role": "user", "content": "hi there"}])"));
}

TEST(UpstreamGenerate, ACompletionGoesToTheCompletionsPathWithItsPrompt) {
  Engine engine;
  engine.stream = event(R"({"object": "text_completion", "choices": [{"index": 0, "text": "ok",)"
                        R"( "finish_reason": "stop"}]})") +
                  kDone;
  Answer answer = ask(engine, [](Request& request) {
    request.kind = RequestKind::completion;
    request.prompt = "Once upon";
    request.messages.clear();
  });
  ASSERT_FALSE(answer.request->error()) << answer.request->error()->message;
  EXPECT_EQ(answer.text, "ok");
  auto requests = engine.server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].target, "/v1/completions");
  EXPECT_EQ(json::parse(requests[0].body).as_object().at("prompt"), "Once upon");
}

TEST(UpstreamGenerate, ReasoningTravelsInItsOwnField) {
  Engine engine;
  engine.stream = event(R"({"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"},)"
                        R"( "finish_reason": null}]})") +
                  content("42") + finish("stop") + kDone;
  Answer answer = ask(engine);
  ASSERT_FALSE(answer.request->error()) << answer.request->error()->message;
  std::string reasoning;
  for (const auto& chunk : answer.chunks)
    reasoning += chunk.reasoning;
  EXPECT_EQ(reasoning, "hmm");
  EXPECT_EQ(answer.text, "42");
}

TEST(UpstreamGenerate, LogprobsAreRefusedBeforeTheEngineIsAsked) {
  Engine engine;
  engine.stream = content("ok") + finish("stop") + kDone;
  Answer answer = ask(engine, [](Request& request) { request.generation.logprobs = true; });
  ASSERT_TRUE(answer.request->error());
  EXPECT_EQ(answer.request->error()->status, 400);
  EXPECT_EQ(answer.request->error()->code, "unsupported_parameter");
  EXPECT_EQ(answer.request->error()->param, "logprobs");
  EXPECT_TRUE(engine.server.requests().empty());
}

TEST(UpstreamGenerate, AnEngineRefusingTheRequestIsA400WithItsReason) {
  Engine engine;
  engine.answer = http_response(400, "application/json",
                                R"({"error": {"message": "temperature must be at most 2"}})");
  Answer answer = ask(engine);
  ASSERT_TRUE(answer.request->error());
  EXPECT_EQ(answer.request->error()->status, 400);
  EXPECT_EQ(answer.request->error()->code, "upstream_rejected");
  EXPECT_NE(answer.request->error()->message.find("temperature must be at most 2"),
            std::string::npos)
      << answer.request->error()->message;
}

TEST(UpstreamGenerate, AnEngineFailingBeforeItsFirstOutputIsA502) {
  Engine engine;
  engine.answer = http_response(500, "application/json", R"({"error": {"message": "oom"}})");
  Answer answer = ask(engine);
  ASSERT_TRUE(answer.request->error());
  EXPECT_EQ(answer.request->error()->status, 502);
  EXPECT_EQ(answer.request->error()->code, "upstream_error");
  EXPECT_TRUE(answer.chunks.empty());
}

// After the first output there is no other endpoint to try: what came stays, and the stream
// ends with the error.
TEST(UpstreamGenerate, AFailureAfterTheFirstOutputEndsTheStreamWithAnError) {
  Engine engine;
  auto sink = std::make_shared<CollectingSink>();
  engine.respond = [&sink](const RecordingServer::Write& write) {
    write(kStreamHead + content("Hel"));
    wait_for_chunks(*sink, 1);
    write(event(R"({"error": {"message": "the engine stopped"}})"));
  };
  Answer answer = ask(engine, {}, sink);
  EXPECT_EQ(answer.text, "Hel");
  ASSERT_TRUE(answer.request->error());
  EXPECT_EQ(answer.request->error()->status, 502);
  EXPECT_NE(answer.request->error()->message.find("the engine stopped"), std::string::npos)
      << answer.request->error()->message;
}

TEST(UpstreamGenerate, ModelMustNameAnUpstreamAtItsPlace) {
  Diagnostics diagnostics;
  check_yaml(
      "version: 1\nresources:\n  llm: {type: gguf_model, path: model.gguf}\nstages:\n"
      "  - {name: generate, type: upstream_generate, config: {model: llm}}\n",
      builtin_registry(), diagnostics);
  std::string errors = all_errors(diagnostics);
  EXPECT_EQ(errors.rfind("test.yaml:5:63: error: stage 'generate' (upstream_generate): key "
                         "'model' needs a",
                         0),
            0u)
      << errors;
  EXPECT_NE(errors.find("resource of type upstream, but 'llm' is of type"), std::string::npos)
      << errors;
}

}  // namespace
}  // namespace chatflow::testing
