// Tool calls as each family writes them, parsed whole and streamed in every way an answer can be
// cut into pieces (each split in two, and a byte at a time): the calls and content are the same
// however the text arrives, and they are written out by hand.
#include "framework/chat/tool_calls.h"

#include <gtest/gtest.h>

namespace chatflow::chat {
namespace {

struct Expected {
  std::string name;
  std::string arguments;
};

struct Case {
  ToolCallFormat format;
  std::string text;
  std::string content;
  std::vector<Expected> calls;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {ToolCallFormat::hermes,
       "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\", "
       "\"n\": [1, {\"a\": \"}\\\"\"}]}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": "
       "\"b\"}\n</tool_call>",
       "Let me look.",
       {{"get_weather", "{\"city\": \"Paris\", \"n\": [1, {\"a\": \"}\\\"\"}]}"}, {"b", "{}"}}},
      {ToolCallFormat::hermes, "no calls <tool_ here", "no calls <tool_ here", {}},
      {ToolCallFormat::hermes,
       "<tool_call>\nnot json</tool_call> after",
       "<tool_call>\nnot json</tool_call> after",
       {}},
      {ToolCallFormat::llama3,
       " {\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", \"parameters\": {\"y\": "
       "true}}",
       "",
       {{"f", "{\"x\": 1}"}, {"g", "{\"y\": true}"}}},
      {ToolCallFormat::llama3,
       "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}",
       "",
       {{"f", "{\"x\": 1}"}}},
      {ToolCallFormat::llama3, "Hello {\"name\": \"f\"}", "Hello {\"name\": \"f\"}", {}},
      {ToolCallFormat::llama3, "{\"answer\": 42}", "{\"answer\": 42}", {}},
      {ToolCallFormat::mistral,
       "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"q\": \"a,b\"}}, {\"name\": \"g\", "
       "\"arguments\": {}}]",
       "",
       {{"f", "{\"q\": \"a,b\"}"}, {"g", "{}"}}},
      {ToolCallFormat::mistral, "[1, 2] is a list", "[1, 2] is a list", {}},
      {ToolCallFormat::generic,
       "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"k\": [2, 3]}}]}",
       "",
       {{"f", "{\"k\": [2, 3]}"}}},
      {ToolCallFormat::generic, "{\"answer\": 1}", "{\"answer\": 1}", {}},
      {ToolCallFormat::generic, "Plain text.", "Plain text.", {}},
      // JSON that names no offered function, or not under "tool_calls", is text.
      {ToolCallFormat::generic,
       "{\"people\": [{\"name\": \"f\", \"arguments\": {}}]}",
       "{\"people\": [{\"name\": \"f\", \"arguments\": {}}]}",
       {}},
      {ToolCallFormat::llama3,
       "{\"name\": \"Bob\", \"age\": 3}",
       "{\"name\": \"Bob\", \"age\": 3}",
       {}},
      {ToolCallFormat::hermes,
       "Hi <tool_call>\n{\"name\": \"nobody\", \"arguments\": {}}\n</tool_call>",
       "Hi <tool_call>\n{\"name\": \"nobody\", \"arguments\": {}}\n</tool_call>",
       {}},
      // A broken block stays text and later blocks still count.
      {ToolCallFormat::hermes,
       "See <tool_call> oops </tool_call> <tool_call> {\"name\": \"f\", \"arguments\": {\"x\": 1}} "
       "</tool_call>",
       "See <tool_call> oops </tool_call>",
       {{"f", "{\"x\": 1}"}}},
      // No arguments key: "{}"; arguments written as a JSON string: the string's text.
      {ToolCallFormat::llama3, "{\"name\": \"g\"}", "", {{"g", "{}"}}},
      {ToolCallFormat::llama3,
       "{\"name\": \"f\", \"parameters\": \"{\\\"x\\\": 1}\"}",
       "",
       {{"f", "{\"x\": 1}"}}},
      // Arguments that are not a JSON object make no call: the text they came in stays content
      // (all of a list's text when one of its calls is such), and later blocks still count.
      {ToolCallFormat::hermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": Paris}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": Paris}}\n</tool_call>",
       {}},
      {ToolCallFormat::hermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"city\\\": Par\"}\n</tool_call> then "
       "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>",
       "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"city\\\": Par\"}\n</tool_call> then",
       {{"g", "{}"}}},
      {ToolCallFormat::llama3,
       "{\"name\": \"f\", \"parameters\": [1, 2]}",
       "{\"name\": \"f\", \"parameters\": [1, 2]}",
       {}},
      {ToolCallFormat::mistral,
       "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": 7}]",
       "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": 7}]",
       {}},
      {ToolCallFormat::generic,
       "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"k\": }}]}",
       "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"k\": }}]}",
       {}},
  };
  return all;
}

// Streams `pieces` and gathers what came out as a client would.
// The functions the answers may call.
const std::vector<std::string> kOffered = {"get_weather", "b", "f", "g"};

ParsedToolCalls streamed(ToolCallFormat format, const std::vector<std::string>& pieces) {
  ToolCallStreamer streamer(format, kOffered);
  ParsedToolCalls out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    ToolCallStreamer::Pieces part = streamer.push(pieces[i], i + 1 == pieces.size());
    out.content += part.content;
    for (const auto& delta : part.calls) {
      if (delta.index == static_cast<int>(out.calls.size())) {
        EXPECT_FALSE(delta.id.empty()) << "the first piece of a call has its id";
        EXPECT_FALSE(delta.name.empty()) << "and its name";
        out.calls.push_back({delta.id, delta.name, {}});
      } else {
        EXPECT_TRUE(delta.id.empty()) << "only the first piece has the id";
      }
      out.calls.at(static_cast<size_t>(delta.index)).arguments += delta.arguments;
    }
  }
  return out;
}

void expect_case(const Case& c, ParsedToolCalls got, const std::string& how) {
  auto trim = [](std::string text) {
    text.erase(0, text.find_first_not_of(" \n"));
    text.erase(text.find_last_not_of(" \n") + 1);
    return text;
  };
  EXPECT_EQ(trim(got.content), c.content) << how << ": " << c.text;
  ASSERT_EQ(got.calls.size(), c.calls.size()) << how << ": " << c.text;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, c.calls[i].name) << how;
    EXPECT_EQ(got.calls[i].arguments, c.calls[i].arguments) << how;
  }
}

TEST(ToolCalls, WholeAnswers) {
  for (const auto& c : cases()) {
    ParsedToolCalls parsed = parse_tool_calls(c.text, c.format, kOffered);
    expect_case(c, parsed, "whole");
    for (const auto& call : parsed.calls) {
      if (c.format == ToolCallFormat::mistral) {
        EXPECT_EQ(call.id.size(), 9u);
      } else {
        EXPECT_EQ(call.id.substr(0, 5), "call_");
        EXPECT_EQ(call.id.size(), 29u);
      }
    }
  }
}

TEST(ToolCalls, EverySplitInTwoGivesTheSameCalls) {
  for (const auto& c : cases()) {
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      expect_case(c, streamed(c.format, {c.text.substr(0, cut), c.text.substr(cut)}),
                  "cut at " + std::to_string(cut));
    }
  }
}

TEST(ToolCalls, AByteAtATimeGivesTheSameCalls) {
  for (const auto& c : cases()) {
    std::vector<std::string> bytes;
    for (char ch : c.text)
      bytes.emplace_back(1, ch);
    expect_case(c, streamed(c.format, bytes), "a byte at a time");
  }
}

TEST(ToolCalls, ACallGoesOutWholeOnceItsObjectCloses) {
  ToolCallStreamer streamer(ToolCallFormat::hermes, kOffered);
  auto first = streamer.push("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"text\": \"hel");
  EXPECT_TRUE(first.calls.empty()) << "arguments not yet known to be JSON are held";
  EXPECT_TRUE(first.content.empty());
  auto second = streamer.push("lo\"}}\n</tool_call>", true);
  ASSERT_EQ(second.calls.size(), 1u);
  EXPECT_EQ(second.calls[0].index, 0);
  EXPECT_FALSE(second.calls[0].id.empty());
  EXPECT_EQ(second.calls[0].name, "f");
  EXPECT_EQ(second.calls[0].arguments, "{\"text\": \"hello\"}");
  EXPECT_TRUE(second.content.empty());
  EXPECT_TRUE(streamer.found_calls());
}

TEST(ToolCalls, AnAnswerCutInsideACallIsContent) {
  const std::string text = "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"x\": 1";
  ParsedToolCalls cut = parse_tool_calls(text, ToolCallFormat::generic, kOffered);
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, text);
  ParsedToolCalls whole =
      parse_tool_calls("{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"x\": 1}}]}",
                       ToolCallFormat::generic, kOffered);
  EXPECT_TRUE(whole.complete);
}

TEST(ToolCalls, AStrictToolsArgumentsMustMatchItsSchema) {
  ToolDefinition weather{"get_weather", "",
                         R"({"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"], "additionalProperties": false})",
                         true};
  const std::string wrong =
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Oslo\"}}</tool_call>";
  const std::string right =
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>";
  ParsedToolCalls refused = parse_tool_calls(wrong, ToolCallFormat::hermes, std::vector{weather});
  EXPECT_TRUE(refused.calls.empty());
  EXPECT_EQ(refused.content, wrong);
  ParsedToolCalls accepted = parse_tool_calls(right, ToolCallFormat::hermes, std::vector{weather});
  ASSERT_EQ(accepted.calls.size(), 1u);
  EXPECT_EQ(accepted.calls[0].arguments, "{\"city\": \"Oslo\"}");
  // Not strict: any JSON object is a call's arguments.
  weather.strict = false;
  EXPECT_EQ(parse_tool_calls(wrong, ToolCallFormat::hermes, std::vector{weather}).calls.size(), 1u);
}

TEST(ToolCalls, FormatFromTheTemplate) {
  EXPECT_EQ(tool_call_format_for("... <tool_call>\\n{{ tool_call | tojson }} ..."),
            ToolCallFormat::hermes);
  EXPECT_EQ(tool_call_format_for("{{- '<|python_tag|>' + ... }}"), ToolCallFormat::llama3);
  EXPECT_EQ(tool_call_format_for("{{- '[TOOL_CALLS]' }}"), ToolCallFormat::mistral);
  EXPECT_EQ(tool_call_format_for("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolCallFormat::generic);
  // Llama 3.2 describes its format; Functionary mentions the tag but writes <function=...>.
  EXPECT_EQ(tool_call_format_for("Respond in the format {\"name\": function name, \"parameters\": "
                                 "dictionary of argument name and its value}"),
            ToolCallFormat::llama3);
  EXPECT_EQ(tool_call_format_for("<|python_tag|> ... <function=get_weather>"),
            ToolCallFormat::generic);
}

TEST(ToolCalls, GenericTextRoundTrips) {
  std::vector<ToolCall> calls = {{"call_1", "f", "{\"a\":1}"}, {"call_2", "g", "{}"}};
  ParsedToolCalls parsed =
      parse_tool_calls(generic_tool_call_text(calls), ToolCallFormat::generic, kOffered);
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].name, "f");
  EXPECT_EQ(parsed.calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(parsed.calls[1].name, "g");
}

}  // namespace
}  // namespace chatflow::chat
