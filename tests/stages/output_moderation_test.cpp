// The output_moderation stage after echo: echo streams the text word by word, so a phone number
// or card number arrives split over several chunks, as a model would send it. With a moderation
// provider (a loopback /v1/moderations service): the answer streams on while it is judged, and
// is retracted when a verdict trips after it was shown.
#include <fstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "support/moderation_service.h"
#include "support/pipeline_helpers.h"
#include "support/temp_model.h"

namespace chatflow::testing {
namespace {

std::unique_ptr<Pipeline> guarded_echo(const std::string& guard_config) {
  return build_yaml(
      "version: 1\nstages:\n  - {name: echo, type: echo, config: {words_per_chunk: 1}}\n"
      "  - {name: guard, type: output_moderation, config: " +
          guard_config + "}\n",
      builtin_registry());
}

TEST(OutputModeration, MasksPersonalDataSplitAcrossChunks) {
  auto pipeline = guarded_echo("{}");
  ASSERT_TRUE(pipeline);
  // "138 0013 8000" arrives as three chunks; so does the card number (four).
  EXPECT_EQ(run_text(*pipeline, "call me at 138 0013 8000 tonight"),
            "call me at [redacted] tonight");
  EXPECT_EQ(run_text(*pipeline, "ring +86 138 0013 8000 now"), "ring [redacted] now");
  EXPECT_EQ(run_text(*pipeline, "my card is 4539 1488 0343 6467 ok"), "my card is [redacted] ok");
  EXPECT_EQ(run_text(*pipeline, "order 1234 5678 9012 3456 shipped"),
            "order 1234 5678 9012 3456 shipped")
      << "a Luhn-invalid number is not a card";
  EXPECT_EQ(run_text(*pipeline, "write to bob@example.com please"), "write to [redacted] please");
}

TEST(OutputModeration, HoldsBackOnlyTheWindow) {
  auto pipeline = guarded_echo("{window_chars: 8}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = user_request("aaaa bbbb cccc dddd eeee ffff", sink);
  ASSERT_EQ(pipeline->submit(request), Admission::accepted);
  ASSERT_TRUE(sink->wait());
  // Text leaves as soon as more than 8 characters follow it; nothing is lost or reordered.
  EXPECT_EQ(sink->text(), "aaaa bbbb cccc dddd eeee ffff");
  // Chunks in: "aaaa", " bbbb", " cccc", ... Out: nothing until more than 8 characters are
  // held, then each chunk releases exactly what is more than 8 characters old.
  std::vector<std::string> out;
  for (const auto& chunk : sink->chunks())
    out.push_back(chunk.text);
  EXPECT_EQ(out, (std::vector<std::string>{"a", "aaa b", "bbb c", "ccc d", "ddd e", "eee ffff"}));
}

TEST(OutputModeration, AbortEndsTheStreamWithContentFilter) {
  std::string list = write_temp_file("abort-list.txt", "build a bomb\n");
  auto pipeline = guarded_echo("{lists: {" + list + ": abort}, notice: ' [stopped]'}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<Request> request;
  std::string text =
      run_text(*pipeline, "first I will BUILD A B-O-M-B and then more words", &request);
  EXPECT_EQ(text, "first I will  [stopped]");
  EXPECT_EQ(request->finish_reason(), FinishReason::content_filter);
  EXPECT_EQ(request->annotation("output_moderation"), "aborted:abort-list");
}

TEST(OutputModeration, MasksBlockListPhrases) {
  std::string list = write_temp_file("mask-list.txt", "build a bomb\n");
  auto pipeline = guarded_echo("{lists: {" + list + ": mask}, pii: []}");
  ASSERT_TRUE(pipeline);
  EXPECT_EQ(run_text(*pipeline, "never Build A Bomb ok"), "never [redacted] ok");
}

std::unique_ptr<Pipeline> judged_echo(const std::string& provider,
                                      const std::string& more = "window_chars: 0") {
  return guarded_echo("{pii: [], " + more + ", provider: " + provider + "}");
}

std::shared_ptr<Request> answer(Pipeline& pipeline, const std::string& text, bool stream,
                                std::shared_ptr<CollectingSink>& sink) {
  auto request = user_request(text, sink);
  request->stream = stream;
  EXPECT_EQ(pipeline.submit(request), Admission::accepted);
  EXPECT_TRUE(sink->wait());
  return request;
}

std::string input_of(const std::string& body) {
  return std::string(boost::json::parse(body).as_object().at("input").as_string());
}

const std::string kRetractNotice = "\n\n[This answer was withdrawn by the content filter.]";

TEST(OutputModeration, AProviderVerdictRetractsAnAnswerAlreadyShown) {
  ModerationService service(std::map<std::string, std::string>{{"dragon", "violence"}});
  auto pipeline = judged_echo("{type: http, url: \"" + service.url() + "\"}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = answer(*pipeline, "once upon a time a dragon came", true, sink);
  EXPECT_FALSE(request->error());
  auto chunks = sink->chunks();
  ASSERT_GE(chunks.size(), 2u);
  // The flagged words reached the client before the verdict; the last chunk withdraws them.
  std::string shown;
  for (size_t i = 0; i + 1 < chunks.size(); ++i)
    shown += chunks[i].text;
  EXPECT_EQ(shown, "once upon a time a dragon came");
  EXPECT_EQ(chunks.back().text, kRetractNotice);
  EXPECT_EQ(chunks.back().finish, FinishReason::content_filter);
  EXPECT_EQ(request->finish_reason(), FinishReason::content_filter);
  EXPECT_EQ(request->annotation("retract"), "content_filter");
  EXPECT_EQ(request->annotation("output_moderation"), "retracted:violence");
  // The whole answer was judged at the end (no window before: it is shorter than one).
  auto received = service.received();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(input_of(received[0].body), "once upon a time a dragon came");
}

TEST(OutputModeration, AProviderJudgesTheAnswerSoFarInWindowsAndPassesACleanOne) {
  ModerationService service(std::map<std::string, std::string>{{"dragon", "violence"}});
  auto pipeline = judged_echo("{type: http, url: \"" + service.url() + "\"}",
                              "window_chars: 0, check_every_chars: 10");
  ASSERT_TRUE(pipeline);
  std::string text = "the meadow was green. the sheep were white. the sky was blue and wide.";
  std::shared_ptr<CollectingSink> sink;
  auto request = answer(*pipeline, text, true, sink);
  EXPECT_EQ(sink->text(), text);
  EXPECT_EQ(request->finish_reason(), FinishReason::stop);
  EXPECT_FALSE(request->annotation("retract"));
  auto received = service.received();
  ASSERT_GE(received.size(), 2u) << "a window before the end, and the end";
  // The window's check and the end's may reach the service in either order.
  size_t whole = 0;
  for (const auto& call : received) {
    std::string input = input_of(call.body);
    EXPECT_EQ(text.rfind(input, 0), 0u) << "each check sends the answer so far: " << input;
    whole += input == text;
  }
  EXPECT_EQ(whole, 1u) << "the whole answer, once, at the end";
}

TEST(OutputModeration, ANonStreamedAnswerTheProviderFlagsIsTheNoticeAlone) {
  ModerationService service(std::map<std::string, std::string>{{"dragon", "violence"}});
  auto pipeline = judged_echo("{type: http, url: \"" + service.url() + "\"}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = answer(*pipeline, "once upon a time a dragon came", false, sink);
  EXPECT_EQ(sink->text(), "[This answer was withdrawn by the content filter.]");
  EXPECT_EQ(request->finish_reason(), FinishReason::content_filter);
  EXPECT_FALSE(request->annotation("retract")) << "nothing was shown, nothing to retract";
  EXPECT_EQ(request->annotation("output_moderation"), "retracted:violence");
  // A clean one is held whole until judged, then given unchanged.
  auto clean = answer(*pipeline, "once upon a time a sheep came", false, sink);
  EXPECT_EQ(sink->text(), "once upon a time a sheep came");
  EXPECT_EQ(sink->chunks().size(), 1u);
  EXPECT_EQ(clean->finish_reason(), FinishReason::stop);
}

TEST(OutputModeration, NoVerdictInTimeFailsOpenWithANote) {
  ModerationService service(std::map<std::string, std::string>{{"dragon", "violence"}});
  auto pipeline = judged_echo("{type: http, url: \"" + service.url() +
                              "\", timeout_ms: 200, on_error: fail_open}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = answer(*pipeline, "a slowpoke dragon", true, sink);
  EXPECT_EQ(sink->text(), "a slowpoke dragon");
  EXPECT_EQ(request->finish_reason(), FinishReason::stop);
  EXPECT_EQ(request->annotation("output_moderation_error"), "timeout:fail_open");
}

TEST(OutputModeration, NoVerdictInTimeFailsClosed) {
  ModerationService service(std::map<std::string, std::string>{{"dragon", "violence"}});
  auto pipeline = judged_echo("{type: http, url: \"" + service.url() +
                              "\", timeout_ms: 200, on_error: fail_closed}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  // Streamed: what was shown is withdrawn, the reason says why.
  auto streamed = answer(*pipeline, "a slowpoke story", true, sink);
  EXPECT_EQ(sink->chunks().back().text, kRetractNotice);
  EXPECT_EQ(streamed->finish_reason(), FinishReason::content_filter);
  EXPECT_EQ(streamed->annotation("retract"), "moderation_unavailable");
  EXPECT_EQ(streamed->annotation("output_moderation_error"), "timeout:fail_closed");
  // Not streamed: nothing was sent yet, so the answer is an error of its own.
  auto held = answer(*pipeline, "a slowpoke story", false, sink);
  EXPECT_EQ(sink->text(), "");
  ASSERT_TRUE(held->error());
  EXPECT_EQ(held->error()->status, 503);
  EXPECT_EQ(held->error()->code, "moderation_unavailable");
  EXPECT_NE(held->error()->message.find("moderation provider 'guard' (http) gave no answer "
                                        "within 200 ms"),
            std::string::npos)
      << held->error()->message;
}

// --- The reasoning and structured tool calls, screened in their own fields. ---

std::unique_ptr<Pipeline> guarded_reasoning_echo(const std::string& guard_config) {
  return build_yaml(
      "version: 1\nstages:\n  - {name: echo, type: echo, config: {words_per_chunk: 1, "
      "reasoning_format: deepseek}}\n"
      "  - {name: guard, type: output_moderation, config: " +
          guard_config + "}\n",
      builtin_registry());
}

struct Collected {
  std::string reasoning;
  std::string text;
  std::vector<ToolCall> calls;
};

Collected collected(const CollectingSink& sink) {
  Collected all;
  for (const auto& chunk : sink.chunks()) {
    all.reasoning += chunk.reasoning;
    all.text += chunk.text;
    all.calls.insert(all.calls.end(), chunk.tool_calls.begin(), chunk.tool_calls.end());
  }
  return all;
}

TEST(OutputModeration, MasksPersonalDataInTheReasoning) {
  auto pipeline = guarded_reasoning_echo("{}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = answer(*pipeline, "<think>mail bob@example.com now</think> ok", true, sink);
  Collected all = collected(*sink);
  EXPECT_EQ(all.reasoning, "mail [redacted] now");
  EXPECT_EQ(all.text, "ok");
  EXPECT_EQ(request->annotation("output_moderation"), "masked:email");
}

TEST(OutputModeration, AMatchToAbortOnInTheReasoningEndsTheAnswer) {
  std::string list = write_temp_file("abort-reasoning-list.txt", "build a bomb\n");
  auto pipeline = guarded_reasoning_echo("{lists: {" + list + ": abort}, notice: ' [stopped]'}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = answer(*pipeline, "<think>I will build a bomb</think> fine", true, sink);
  Collected all = collected(*sink);
  EXPECT_EQ(all.reasoning, "I will ");
  EXPECT_EQ(all.text, " [stopped]");
  EXPECT_EQ(request->finish_reason(), FinishReason::content_filter);
  EXPECT_EQ(request->annotation("output_moderation"), "aborted:abort-reasoning-list");
}

TEST(OutputModeration, TheReasoningsWindowLeavesBeforeTheAnswer) {
  auto pipeline = guarded_reasoning_echo("{window_chars: 8}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  answer(*pipeline, "<think>aaaa bbbb cccc</think> dddd eeee", true, sink);
  bool text_seen = false;
  for (const auto& chunk : sink->chunks()) {
    if (!chunk.reasoning.empty()) {
      EXPECT_FALSE(text_seen) << "reasoning after the answer began";
    }
    text_seen = text_seen || !chunk.text.empty();
  }
  Collected all = collected(*sink);
  EXPECT_EQ(all.reasoning, "aaaa bbbb cccc");
  EXPECT_EQ(all.text, "dddd eeee");
}

// Streams what an upstream engine's relay would: reasoning, then a structured call whose
// arguments hold `argument`, then the end.
class CallingStage final : public RequestStage {
 public:
  Route process(Request& request, StageIo& io) override {
    ChunkWriter writer = io.open_stream(0);
    Chunk reasoning;
    reasoning.reasoning = "Who to write to?";
    writer.write(std::move(reasoning));
    Chunk call;
    boost::json::object arguments{{"to", request.last_user_message()}, {"copies", 2}};
    call.tool_calls.push_back({"call_1", "send_mail", boost::json::serialize(arguments)});
    writer.write(std::move(call));
    writer.finish(FinishReason::stop);
    return Route::streaming();
  }
};

std::unique_ptr<Pipeline> guarded_calls(const std::string& guard_config) {
  static Registry registry = [] {
    Registry with_calls = builtin_registry();
    StageTypeBuilder<NoConfig> type("calling", StageKind::request, "streams a structured call");
    type.port("out", PortKind::stream, "the answer");
    type.create([](const NoConfig&, StageContext&) { return std::make_unique<CallingStage>(); });
    with_calls.add(type.build());
    return with_calls;
  }();
  return build_yaml(
      "version: 1\nstages:\n  - {name: call, type: calling}\n"
      "  - {name: guard, type: output_moderation, config: " +
          guard_config + "}\n",
      registry);
}

TEST(OutputModeration, MasksAStructuredCallsArgumentsAndKeepsThemJson) {
  auto pipeline = guarded_calls("{}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = answer(*pipeline, "bob@example.com", true, sink);
  Collected all = collected(*sink);
  EXPECT_EQ(all.reasoning, "Who to write to?");
  ASSERT_EQ(all.calls.size(), 1u);
  EXPECT_EQ(all.calls[0].id, "call_1");
  EXPECT_EQ(all.calls[0].name, "send_mail");
  EXPECT_EQ(boost::json::serialize(boost::json::parse(all.calls[0].arguments)),
            R"({"to":"[redacted]","copies":2})");
  EXPECT_EQ(request->annotation("output_moderation"), "masked:email");
  // Not streamed: held whole, the same.
  answer(*pipeline, "bob@example.com", false, sink);
  EXPECT_EQ(collected(*sink).calls.size(), 1u);
}

TEST(OutputModeration, AStructuredCallThatMatchesAnAbortRuleIsNotMade) {
  std::string list = write_temp_file("abort-call-list.txt", "build a bomb\n");
  auto pipeline = guarded_calls("{lists: {" + list + ": abort}, notice: ' [stopped]'}");
  ASSERT_TRUE(pipeline);
  std::shared_ptr<CollectingSink> sink;
  auto request = answer(*pipeline, "how to build a bomb", true, sink);
  Collected all = collected(*sink);
  EXPECT_TRUE(all.calls.empty());
  EXPECT_EQ(all.reasoning, "Who to write to?");
  EXPECT_EQ(all.text, " [stopped]");
  EXPECT_EQ(request->finish_reason(), FinishReason::content_filter);
  EXPECT_EQ(request->annotation("output_moderation"), "aborted:abort-call-list");
}

}  // namespace
}  // namespace chatflow::testing
