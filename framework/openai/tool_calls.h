// Tool calls as chat models write them, turned into OpenAI's tool_calls: Hermes/Qwen
// "<tool_call>{json}</tool_call>" blocks anywhere in the answer; Llama 3.x's JSON object
// ({"name", "parameters"}, optionally after <|python_tag|>, several joined by ";"); Mistral's
// "[TOOL_CALLS][{...}, ...]"; and, for templates that know none of these, chatflow's generic
// {"tool_calls": [{"name", "arguments"}]} answer, which the system prompt then asks for.
//
// Streaming: text arrives in arbitrary pieces. Text that could open a call is held until the
// next piece decides; inside a call the function's name is sent once it is whole, then the
// arguments as they arrive, as OpenAI streams them. A finished answer goes through the same
// streamer at once, so streamed and whole answers agree.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/api/request.h"

namespace chatflow::openai {

std::string_view to_string(ToolCallFormat format);

// The format a chat template's model writes calls in, from the markers its source mentions
// (generic when it mentions none).
ToolCallFormat tool_call_format_for(std::string_view template_source);

// A fresh call id: "call_" and 24 letters or digits; Mistral's templates insist on 9.
std::string new_tool_call_id(ToolCallFormat format);

// One piece of a streamed call: the first piece of each call has its id and name.
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

class ToolCallStreamer {
 public:
  explicit ToolCallStreamer(ToolCallFormat format);

  struct Pieces {
    std::string content;
    std::vector<ToolCallDelta> calls;
  };
  // What `text` adds that can be told apart now; with `last`, everything held back too (an
  // opened call that never became one is content after all).
  Pieces push(std::string_view text, bool last = false);

  // Whether any call was found so far.
  bool found_calls() const { return calls_started_ > 0; }

 private:
  enum class Mode { content, call, trailer, plain };

  void scan_content(Pieces& pieces, bool last);
  // Each returns false while it waits for more text.
  bool scan_call(Pieces& pieces, bool last);
  bool scan_trailer(bool last);
  void open_call(size_t at);

  ToolCallFormat format_;
  Mode mode_ = Mode::content;
  std::string held_;             // text not yet given out
  bool answer_started_ = false;  // some non-space text was seen (anchored formats)
  int calls_started_ = 0;
  int calls_before_region_ = 0;  // calls_started_ when the current region opened
  bool skip_space_ = false;      // after a Hermes block: its trailing line breaks
  // The call region being read: JSON nesting and where its pieces are.
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  size_t position_ = 0;  // next byte of held_ to scan
  int call_depth_ = 1;   // nesting of a call object's members
  std::string key_;      // the member name just read at the call's depth
  bool reading_key_ = false;
  bool after_colon_ = false;
  enum class Value { none, name, arguments, other } value_ = Value::none;
  size_t value_start_ = 0;
  int value_depth_ = 0;
  std::string name_;
  std::string pending_arguments_;  // arguments read before the name
  bool header_sent_ = false;
  size_t arguments_sent_ = 0;  // bytes of the current arguments value given out
};

// A whole answer: its content (calls removed, trimmed) and its calls.
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format);

// The generic format's instruction and the tools, for a system prompt whose template cannot
// show tools itself.
std::string generic_tool_instructions(const std::vector<ToolDefinition>& tools);
// An assistant turn's calls written in the generic format (for templates that cannot show them).
std::string generic_tool_call_text(const std::vector<ToolCall>& calls);

}  // namespace chatflow::openai
