#include "framework/chat/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <random>

#include <boost/json.hpp>

#include "framework/grammar/grammar.h"
#include "framework/grammar/matcher.h"
#include "framework/text/stream_markers.h"

namespace chatflow::chat {
using text::is_space;
using text::partial_marker;
namespace json = boost::json;
namespace {

constexpr std::string_view kHermesOpens = "<tool_call>";
constexpr std::string_view kHermesCloses = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
// Llama 3.2's templates describe the call instead of naming a tag.
constexpr std::string_view kLlamaInstruction = "\"parameters\": dictionary of argument name";

std::string trim(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && is_space(text[begin]))
    ++begin;
  while (end > begin && is_space(text[end - 1]))
    --end;
  return std::string(text.substr(begin, end - begin));
}

// Nesting of a call object's members: Hermes' and Llama's objects stand alone, Mistral's sit in
// an array, the generic ones in {"tool_calls": [...]}.
int call_depth_of(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::mistral:
      return 2;
    case ToolCallFormat::generic:
      return 3;
    default:
      return 1;
  }
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace

std::string_view to_string(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::none:
      return "none";
    case ToolCallFormat::hermes:
      return "hermes";
    case ToolCallFormat::llama3:
      return "llama3";
    case ToolCallFormat::mistral:
      return "mistral";
    case ToolCallFormat::generic:
      return "generic";
  }
  return "none";
}

ToolCallFormat tool_call_format_for(std::string_view source) {
  // Functionary mentions <|python_tag|> but writes <function=...>: none of ours.
  if (contains(source, "<function=")) return ToolCallFormat::generic;
  if (contains(source, kHermesOpens)) return ToolCallFormat::hermes;
  if (contains(source, kMistralMarker)) return ToolCallFormat::mistral;
  if (contains(source, kPythonTag) || contains(source, kLlamaInstruction))
    return ToolCallFormat::llama3;
  return ToolCallFormat::generic;
}

std::string new_tool_call_id(ToolCallFormat format) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 random(std::random_device{}());
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  bool mistral = format == ToolCallFormat::mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i)
    id += kAlphabet[pick(random)];
  return id;
}

bool valid_function_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

std::vector<std::string> offered_names(const std::vector<ToolDefinition>& tools) {
  std::vector<std::string> names;
  for (const auto& tool : tools)
    names.push_back(tool.name);
  return names;
}

ToolCallStreamer::ToolCallStreamer(ToolCallFormat format, std::vector<std::string> offered)
    : format_(format), offered_(std::move(offered)), call_depth_(call_depth_of(format)) {}

ToolCallStreamer::ToolCallStreamer(ToolCallFormat format,
                                   const std::vector<ToolDefinition>& offered)
    : ToolCallStreamer(format, offered_names(offered)) {
  for (const auto& tool : offered)
    if (tool.strict) strict_schemas_[tool.name] = tool.parameters.empty() ? "{}" : tool.parameters;
}

bool ToolCallStreamer::arguments_acceptable(const std::string& name,
                                            std::string_view arguments) const {
  json::error_code error;
  json::value parsed = json::parse(arguments, error);
  if (error || !parsed.is_object()) return false;
  auto schema = strict_schemas_.find(name);
  if (schema == strict_schemas_.end()) return true;
  auto [compiled, added] = strict_grammars_.try_emplace(name);
  if (added) {
    try {
      compiled->second = grammar::compile_json_schema(json::parse(schema->second));
    } catch (const std::exception&) {
      // A schema the grammar compiler cannot read (the local engine refuses it before it runs;
      // an upstream engine enforced it itself): only the JSON object is checked.
    }
  }
  if (!compiled->second) return true;
  // The grammar reads JSON in a canonical shape: the model's text is re-serialised first.
  grammar::Matcher matcher(compiled->second);
  return matcher.advance(json::serialize(parsed)) && matcher.accepting();
}

bool ToolCallStreamer::offered(const std::string& name) const {
  return std::find(offered_.begin(), offered_.end(), name) != offered_.end();
}

ToolCallStreamer::Pieces ToolCallStreamer::push(std::string_view text, bool last) {
  Pieces pieces;
  held_.append(text);
  while (true) {
    if (mode_ == Mode::plain) {
      emit_content(held_, pieces);
      held_.clear();
      break;
    }
    if (mode_ == Mode::content) {
      scan_content(pieces, last);
      if (mode_ == Mode::content) break;
      continue;
    }
    bool ended = mode_ == Mode::call ? scan_call(pieces, last) : scan_trailer(last);
    if (!ended) break;
  }
  if (last) held_space_.clear();  // the answer's trailing whitespace
  return pieces;
}

void ToolCallStreamer::emit_content(std::string_view text, Pieces& pieces) {
  size_t end = text.size();
  while (end > 0 && is_space(text[end - 1]))
    --end;
  if (end == 0) {
    if (content_started_) held_space_.append(text);
    return;
  }
  std::string_view body = text.substr(0, end);
  if (!content_started_) {
    size_t first = 0;
    while (is_space(body[first]))
      ++first;
    body.remove_prefix(first);
    content_started_ = true;
  } else {
    pieces.content += held_space_;
  }
  pieces.content.append(body);
  held_space_.assign(text.substr(end));
}

void ToolCallStreamer::open_call(size_t at) {
  mode_ = Mode::call;
  calls_before_region_ = calls_started_;
  space_before_region_ = std::move(held_space_);  // not content if a call follows
  held_space_.clear();
  position_ = at;
  depth_ = 0;
  in_string_ = escaped_ = false;
  in_call_list_ = format_ != ToolCallFormat::generic;
  outer_key_.clear();
}

void ToolCallStreamer::scan_content(Pieces& pieces, bool last) {
  if (format_ == ToolCallFormat::hermes) {
    size_t found = held_.find(kHermesOpens);
    if (found != std::string::npos) {
      emit_content(std::string_view(held_).substr(0, found), pieces);
      held_.erase(0, found);
      open_call(kHermesOpens.size());
      return;
    }
    size_t keep = last ? 0 : partial_marker(held_, kHermesOpens);
    emit_content(std::string_view(held_).substr(0, held_.size() - keep), pieces);
    held_.erase(0, held_.size() - keep);
    return;
  }
  // The other formats call at the start of the answer only.
  size_t first = 0;
  while (first < held_.size() && is_space(held_[first]))
    ++first;
  if (first == held_.size()) {
    if (last) held_.clear();
    return;
  }
  std::string_view rest = std::string_view(held_).substr(first);
  std::string_view marker = format_ == ToolCallFormat::llama3    ? kPythonTag
                            : format_ == ToolCallFormat::mistral ? kMistralMarker
                                                                 : std::string_view();
  size_t skip = 0;
  if (!marker.empty()) {
    if (rest.size() < marker.size() && marker.substr(0, rest.size()) == rest) {
      if (!last) return;  // could still become the marker
    } else if (rest.substr(0, marker.size()) == marker) {
      skip = marker.size();
      while (first + skip < held_.size() && is_space(held_[first + skip]))
        ++skip;
      if (first + skip == held_.size() && !last) return;
    }
  }
  char opener = format_ == ToolCallFormat::mistral ? '[' : '{';
  if (first + skip < held_.size() && held_[first + skip] == opener) {
    open_call(first + skip);
    return;
  }
  mode_ = Mode::plain;
}

void ToolCallStreamer::set_arguments(std::string arguments) {
  arguments_given_ = true;
  region_calls_.back().arguments = std::move(arguments);
}

void ToolCallStreamer::start_object() {
  key_.clear();
  name_.clear();
  pending_arguments_.clear();
  header_sent_ = rejected_ = arguments_given_ = false;
  after_colon_ = reading_key_ = false;
  value_ = Value::none;
}

// A value at the call's depth ends at `end` (exclusive).
void ToolCallStreamer::end_value(size_t end) {
  std::string_view slice = std::string_view(held_).substr(value_start_, end - value_start_);
  if (value_ == Value::name) {
    json::error_code error;
    json::value parsed = json::parse(slice, error);
    name_ = !error && parsed.is_string() ? std::string(parsed.get_string()) : "";
    if (!offered(name_)) {
      rejected_ = true;  // JSON that names no offered function is no call
    } else if (!header_sent_) {
      header_sent_ = call_open_ = true;
      ++calls_started_;
      region_calls_.push_back({calls_started_ - 1, new_tool_call_id(format_), name_, {}});
      if (!pending_arguments_.empty()) set_arguments(std::move(pending_arguments_));
      pending_arguments_.clear();
    }
  } else if (value_ == Value::arguments) {
    std::string arguments(slice);
    if (slice.front() == '"') {
      // Arguments written as a JSON string hold the object's text: the text is the arguments.
      json::error_code error;
      json::value parsed = json::parse(slice, error);
      if (!error && parsed.is_string()) arguments = std::string(parsed.get_string());
    }
    if (header_sent_) {
      set_arguments(std::move(arguments));
    } else {
      pending_arguments_ = std::move(arguments);
    }
  }
  value_ = Value::none;
  after_colon_ = false;
}

// Reads the call region from position_; gives out each call's name once whole and its
// arguments as they come. Returns true when the region ended (mode_ changed).
bool ToolCallStreamer::scan_call(Pieces& pieces, bool last) {
  auto first_of_value = [&] { return value_ != Value::none ? held_[value_start_] : '\0'; };
  for (; position_ < held_.size(); ++position_) {
    char c = held_[position_];
    bool container_value = first_of_value() == '{' || first_of_value() == '[';
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
        if (reading_key_) {
          reading_key_ = false;
        } else if (value_ != Value::none && first_of_value() == '"' && depth_ == value_depth_) {
          end_value(position_ + 1);
        }
      } else if (reading_key_) {
        key_.push_back(c);
      }
      if (depth_ == 1 && !reading_key_ && format_ == ToolCallFormat::generic && in_string_)
        outer_key_.push_back(c);
      continue;
    }
    if (depth_ == 0 && !is_space(c) && c != '{' && c != '[') {
      // The region does not hold a JSON value where a call should be: it was text.
      held_space_ = space_before_region_;
      emit_content(std::string_view(held_).substr(0, position_), pieces);
      held_.erase(0, position_);
      mode_ = format_ == ToolCallFormat::hermes ? Mode::content : Mode::plain;
      return true;
    }
    if (is_space(c)) continue;
    bool at_members = depth_ == call_depth_ && in_call_list_;
    if (at_members && value_ == Value::none && after_colon_ && c != ':') {
      value_start_ = position_;
      value_depth_ = depth_;
      value_ = key_ == "name"                                ? Value::name
               : key_ == "arguments" || key_ == "parameters" ? Value::arguments
                                                             : Value::other;
      container_value = c == '{' || c == '[';
    }
    switch (c) {
      case '"':
        in_string_ = true;
        if (at_members && !after_colon_ && value_ == Value::none) {
          reading_key_ = true;
          key_.clear();
        }
        if (depth_ == 1 && format_ == ToolCallFormat::generic) outer_key_.clear();
        break;
      case '{':
      case '[':
        if (format_ == ToolCallFormat::generic && depth_ == 1 && c == '[')
          in_call_list_ = outer_key_ == "tool_calls";
        ++depth_;
        if (depth_ == call_depth_ && c == '{' && in_call_list_) start_object();
        break;
      case '}':
      case ']':
        if (at_members && value_ != Value::none && !container_value) end_value(position_);
        --depth_;
        if (value_ != Value::none && container_value && depth_ == value_depth_) {
          end_value(position_ + 1);
        }
        if (depth_ == call_depth_ - 1 && c == '}' && in_call_list_ && header_sent_) {
          if (!arguments_given_) set_arguments("{}");  // a call that takes none
          header_sent_ = call_open_ = false;
        }
        if (format_ == ToolCallFormat::generic && depth_ == 1) in_call_list_ = false;
        if (depth_ == 0) {
          end_region(position_ + 1, pieces);
          mode_ = Mode::trailer;
          held_.erase(0, position_ + 1);
          position_ = 0;
          return true;
        }
        break;
      case ':':
        if (at_members && value_ == Value::none) after_colon_ = true;
        break;
      case ',':
        if (at_members) {
          if (value_ != Value::none && !container_value) end_value(position_);
          after_colon_ = false;
          value_ = Value::none;
        }
        break;
      default:
        break;
    }
  }
  if (last) {
    // The answer ended inside the region: what it holds is text, not calls that can be made.
    call_open_ = header_sent_ = false;
    region_calls_.clear();
    end_region(held_.size(), pieces);
    held_.clear();
    mode_ = Mode::plain;
    return true;
  }
  return false;
}

void ToolCallStreamer::end_region(size_t end, Pieces& pieces) {
  bool called = calls_started_ > calls_before_region_ && !region_calls_.empty();
  for (const auto& call : region_calls_)
    called = called && arguments_acceptable(call.name, call.arguments);
  if (called) {
    for (auto& call : region_calls_)
      pieces.calls.push_back(std::move(call));
  } else {
    // JSON that is no call, or calls that cannot be made: text after all.
    calls_started_ = calls_before_region_;
    held_space_ = space_before_region_;
    emit_content(std::string_view(held_).substr(0, end), pieces);
  }
  region_calls_.clear();
}

bool ToolCallStreamer::scan_trailer(bool last) {
  // After a region: Hermes closes the block and goes back to text; Llama may chain calls with
  // ";"; otherwise the rest is text.
  size_t first = 0;
  while (first < held_.size() && is_space(held_[first]))
    ++first;
  if (format_ == ToolCallFormat::hermes) {
    std::string_view rest = std::string_view(held_).substr(first);
    if (rest.size() < kHermesCloses.size() && kHermesCloses.substr(0, rest.size()) == rest &&
        !last) {
      return false;
    }
    // A block that held no call keeps its closing tag as the text it was.
    bool called = calls_started_ > calls_before_region_;
    if (called && rest.substr(0, kHermesCloses.size()) == kHermesCloses) {
      held_.erase(0, first + kHermesCloses.size());
    }
    mode_ = Mode::content;
    return true;
  }
  if (format_ == ToolCallFormat::llama3) {
    size_t next = first;
    if (next < held_.size() && held_[next] == ';') ++next;
    while (next < held_.size() && is_space(held_[next]))
      ++next;
    if (next == held_.size() && !last) return false;
    if (next < held_.size() && held_[next] == '{') {
      open_call(next);
      return true;
    }
  }
  mode_ = Mode::plain;
  return true;
}

namespace {

ParsedToolCalls parse_with(ToolCallStreamer& streamer, std::string_view text) {
  ParsedToolCalls parsed;
  ToolCallStreamer::Pieces pieces = streamer.push(text, /*last=*/true);
  for (auto& delta : pieces.calls) {
    if (delta.index >= static_cast<int>(parsed.calls.size())) parsed.calls.resize(delta.index + 1);
    ToolCall& call = parsed.calls[static_cast<size_t>(delta.index)];
    if (!delta.id.empty()) call.id = delta.id;
    if (!delta.name.empty()) call.name = delta.name;
    call.arguments += delta.arguments;
  }
  parsed.content = trim(pieces.content);
  parsed.complete = streamer.calls_complete();
  return parsed;
}

}  // namespace

ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format,
                                 const std::vector<std::string>& offered) {
  ToolCallStreamer streamer(format, offered);
  return parse_with(streamer, text);
}

ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format,
                                 const std::vector<ToolDefinition>& offered) {
  ToolCallStreamer streamer(format, offered);
  return parse_with(streamer, text);
}

std::string generic_tool_instructions(const std::vector<ToolDefinition>& tools) {
  std::string text =
      "You can call functions. To call one or more, answer with only this JSON and nothing "
      "else: {\"tool_calls\": [{\"name\": \"<function name>\", \"arguments\": {<its "
      "arguments>}}]}. Answer in text when no function helps.\nFunctions (each with the JSON "
      "Schema of its arguments):";
  for (const auto& tool : tools) {
    json::object entry{{"name", tool.name}};
    if (!tool.description.empty()) entry["description"] = tool.description;
    json::error_code error;
    json::value parameters = tool.parameters.empty() ? json::value(json::object{{"type", "object"}})
                                                     : json::parse(tool.parameters, error);
    entry["parameters"] = error ? json::value(json::object{}) : parameters;
    text += "\n" + json::serialize(entry);
  }
  return text;
}

std::string generic_tool_call_text(const std::vector<ToolCall>& calls) {
  json::array list;
  for (const auto& call : calls) {
    json::error_code error;
    json::value arguments = json::parse(call.arguments, error);
    list.push_back(json::object{{"name", call.name},
                                {"arguments", error ? json::value(json::object{}) : arguments}});
  }
  return json::serialize(json::object{{"tool_calls", std::move(list)}});
}

}  // namespace chatflow::chat
