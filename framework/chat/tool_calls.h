// Tool calls as chat models write them, turned into OpenAI's tool_calls: Hermes/Qwen
// "<tool_call>{json}</tool_call>" blocks anywhere in the answer; Llama 3.x's JSON object
// ({"name", "parameters"}, optionally after <|python_tag|>, several joined by ";"); Mistral's
// "[TOOL_CALLS][{...}, ...]"; and, for templates that know none of these, chatflow's generic
// {"tool_calls": [{"name", "arguments"}]} answer, which the system prompt then asks for. Only a
// call of an offered function counts: any other JSON stays text.
//
// A call is only a call when it can be made: its arguments are a JSON object (and, for a tool
// declared `strict`, one its parameters schema accepts). Otherwise the text the calls were
// written in (a Hermes block, a Llama object, a Mistral or generic list) stays in the content,
// as vLLM's tool parsers leave JSON they cannot read; an answer cut inside a call (max_tokens)
// is such text too. The client never receives arguments it could not parse.
//
// Streaming: text arrives in arbitrary pieces. Text that could open a call is held until the
// next piece decides; the calls written in one place (a Hermes block, the list of a Mistral or
// generic answer, one Llama object) are held until that place closes and then sent whole, each
// with its id, name and arguments, once they are checked. Content is trimmed at both ends and
// around calls, as a whole answer's is. A finished answer goes through the same streamer at once,
// so streamed and whole answers agree.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/api/request.h"

namespace chatflow::grammar {
class Grammar;
}

namespace chatflow::chat {

std::string_view to_string(ToolCallFormat format);

// The format a chat template's model writes calls in, from what its source tells the model
// (generic when it is none chatflow reads).
ToolCallFormat tool_call_format_for(std::string_view template_source);

// A fresh call id: "call_" and 24 letters or digits; Mistral's templates insist on 9.
std::string new_tool_call_id(ToolCallFormat format);

// OpenAI's rule for a function's name: 1 to 64 letters, digits, underscores or dashes.
bool valid_function_name(std::string_view name);

// The names of the functions a request offers.
std::vector<std::string> offered_names(const std::vector<ToolDefinition>& tools);

// One piece of a streamed call: the first piece of each call has its id and name.
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

class ToolCallStreamer {
 public:
  ToolCallStreamer(ToolCallFormat format, std::vector<std::string> offered);
  // The functions a request offers, whose `strict` ones have their arguments checked against
  // their schemas too.
  ToolCallStreamer(ToolCallFormat format, const std::vector<ToolDefinition>& offered);

  struct Pieces {
    std::string content;
    std::vector<ToolCallDelta> calls;
  };
  // What `text` adds that can be told apart now; with `last`, everything held back too (an
  // opened call that never became one is content after all).
  Pieces push(std::string_view text, bool last = false);

  // Whether any call was found so far, and whether every call found was written to its end (an
  // answer cut inside a call did not finish with calls).
  bool found_calls() const { return calls_started_ > 0; }
  bool calls_complete() const { return !call_open_; }

  // Whether `arguments` can be the arguments of a call of `name` (see above).
  bool arguments_acceptable(const std::string& name, std::string_view arguments) const;

 private:
  enum class Mode { content, call, trailer, plain };
  enum class Value { none, name, arguments, other };

  void scan_content(Pieces& pieces, bool last);
  // Each returns false while it waits for more text.
  bool scan_call(Pieces& pieces, bool last);
  bool scan_trailer(bool last);
  void open_call(size_t at);
  // Content as a whole answer shows it: no space at its start, none before a call or at its end.
  void emit_content(std::string_view text, Pieces& pieces);
  void set_arguments(std::string arguments);
  void start_object();
  void end_value(size_t end);
  // The region of calls ended at held_[end]: its calls go out if each can be made, else the
  // region's text is content.
  void end_region(size_t end, Pieces& pieces);
  bool offered(const std::string& name) const;

  ToolCallFormat format_;
  std::vector<std::string> offered_;
  Mode mode_ = Mode::content;
  std::string held_;        // text not yet given out
  std::string held_space_;  // content's trailing whitespace, given out once text follows it
  std::string space_before_region_;  // held_space_ when a call region opened
  bool content_started_ = false;
  int calls_started_ = 0;
  int calls_before_region_ = 0;  // calls_started_ when the current region opened
  bool call_open_ = false;       // a call was announced and its object has not closed
  // The call region being read: JSON nesting and where its pieces are.
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  size_t position_ = 0;  // next byte of held_ to scan
  int call_depth_ = 1;   // nesting of a call object's members
  std::string key_;      // the member name just read at the call's depth
  bool reading_key_ = false;
  bool after_colon_ = false;
  std::string outer_key_;     // generic: the top object's member being read
  bool in_call_list_ = true;  // generic: inside "tool_calls": [...]
  Value value_ = Value::none;
  size_t value_start_ = 0;
  int value_depth_ = 0;
  std::string name_;
  bool rejected_ = false;                    // this object names no offered function
  std::string pending_arguments_;            // arguments read before the name
  bool header_sent_ = false;                 // the current object is a call of an offered function
  bool arguments_given_ = false;             // the current call's arguments were read
  std::vector<ToolCallDelta> region_calls_;  // the current region's calls, held until it ends
  // Offered functions declared strict: their schemas' text, and each compiled once it is needed
  // (null when the schema cannot be compiled: then only the JSON object is checked).
  std::map<std::string, std::string> strict_schemas_;
  mutable std::map<std::string, std::shared_ptr<const grammar::Grammar>> strict_grammars_;
};

// A whole answer: its content (calls removed, trimmed) and its calls.
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
  bool complete = true;  // every call written to its end
};
ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format,
                                 const std::vector<std::string>& offered);
ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format,
                                 const std::vector<ToolDefinition>& offered);

// The generic format's instruction and the tools, for a system prompt whose template cannot
// show tools itself.
std::string generic_tool_instructions(const std::vector<ToolDefinition>& tools);
// An assistant turn's calls written in the generic format (for templates that cannot show them).
std::string generic_tool_call_text(const std::vector<ToolCall>& calls);

}  // namespace chatflow::chat
