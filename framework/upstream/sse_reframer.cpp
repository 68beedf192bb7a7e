#include "framework/upstream/sse_reframer.h"

#include <algorithm>

#include <boost/json.hpp>

namespace chatflow::upstream {
namespace json = boost::json;

namespace {

std::string string_at(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  return value && value->is_string() ? std::string(value->as_string()) : std::string();
}

int64_t integer_at(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  if (!value) return 0;
  // An engine's counts are bounded here so that no sum of them downstream can overflow.
  constexpr int64_t kMostTokens = int64_t{1} << 40;
  if (value->is_int64()) return std::clamp<int64_t>(value->as_int64(), 0, kMostTokens);
  if (value->is_uint64())
    return static_cast<int64_t>(std::min<uint64_t>(value->as_uint64(), kMostTokens));
  return 0;
}

std::optional<Usage> usage_of(const json::object& object) {
  const json::value* value = object.if_contains("usage");
  if (!value || !value->is_object()) return std::nullopt;
  const json::object& usage = value->as_object();
  Usage counted;
  counted.prompt_tokens = integer_at(usage, "prompt_tokens");
  counted.completion_tokens = integer_at(usage, "completion_tokens");
  if (const json::value* details = usage.if_contains("prompt_tokens_details");
      details && details->is_object()) {
    counted.cached_prompt_tokens = integer_at(details->as_object(), "cached_tokens");
  }
  return counted;
}

void read_tool_calls(const json::value& calls, StreamEvent& event) {
  if (!calls.is_array()) return;
  for (const auto& item : calls.as_array()) {
    if (!item.is_object()) continue;
    const json::object& call = item.as_object();
    ToolCallPiece piece;
    piece.index = static_cast<int>(integer_at(call, "index"));
    piece.id = string_at(call, "id");
    if (const json::value* function = call.if_contains("function");
        function && function->is_object()) {
      piece.name = string_at(function->as_object(), "name");
      piece.arguments = string_at(function->as_object(), "arguments");
    }
    event.tool_calls.push_back(std::move(piece));
  }
}

}  // namespace

StreamEvent parse_stream_object(std::string_view text) {
  StreamEvent event;
  boost::system::error_code error;
  json::value parsed = json::parse(text, error);
  if (error || !parsed.is_object()) {
    event.kind = StreamEvent::Kind::error;
    event.error =
        "the engine sent an event that is not a JSON object: " + std::string(text.substr(0, 200));
    return event;
  }
  const json::object& object = parsed.as_object();
  if (const json::value* failure = object.if_contains("error"); failure && !failure->is_null()) {
    event.kind = StreamEvent::Kind::error;
    event.error = failure->is_object()   ? string_at(failure->as_object(), "message")
                  : failure->is_string() ? std::string(failure->as_string())
                                         : json::serialize(*failure);
    if (event.error.empty()) event.error = json::serialize(*failure);
    return event;
  }
  event.usage = usage_of(object);
  const json::value* choices = object.if_contains("choices");
  if (!choices || !choices->is_array() || choices->as_array().empty()) return event;
  const json::value& first = choices->as_array().front();
  if (!first.is_object()) return event;
  const json::object& choice = first.as_object();
  if (const json::value* finish = choice.if_contains("finish_reason");
      finish && finish->is_string()) {
    event.finish_reason = std::string(finish->as_string());
  }
  // text_completion events carry "text"; chat.completion.chunk events a "delta".
  event.content = string_at(choice, "text");
  if (const json::value* delta = choice.if_contains("delta"); delta && delta->is_object()) {
    const json::object& fields = delta->as_object();
    event.content += string_at(fields, "content");
    event.reasoning = string_at(fields, "reasoning_content");
    if (event.reasoning.empty()) event.reasoning = string_at(fields, "reasoning");
    if (const json::value* calls = fields.if_contains("tool_calls")) read_tool_calls(*calls, event);
  }
  return event;
}

std::string error_message_of(std::string_view body) {
  boost::system::error_code error;
  json::value parsed = json::parse(body, error);
  if (!error && parsed.is_object()) {
    const json::object& object = parsed.as_object();
    if (const json::value* failure = object.if_contains("error")) {
      if (failure->is_object()) {
        std::string message = string_at(failure->as_object(), "message");
        if (!message.empty()) return message;
      }
      if (failure->is_string()) return std::string(failure->as_string());
    }
    std::string message = string_at(object, "message");
    if (!message.empty()) return message;
  }
  std::string text(body.substr(0, 300));
  for (char& c : text)
    c = (c == '\n' || c == '\r') ? ' ' : c;
  return text.empty() ? "(no body)" : text;
}

std::vector<StreamEvent> SseReframer::push(std::string_view bytes) {
  std::vector<StreamEvent> events;
  while (!bytes.empty() && !ended_) {
    size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      partial_line_.append(bytes);
      if (partial_line_.size() + data_.size() > kMaxEventBytes) {
        StreamEvent event;
        event.kind = StreamEvent::Kind::error;
        event.error =
            "the engine sent an event longer than " + std::to_string(kMaxEventBytes) + " bytes";
        events.push_back(std::move(event));
        ended_ = true;
      }
      break;
    }
    std::string_view piece = bytes.substr(0, newline);
    bytes.remove_prefix(newline + 1);
    if (partial_line_.empty()) {
      take_line(piece, events);
    } else {
      partial_line_.append(piece);
      std::string line = std::move(partial_line_);
      partial_line_.clear();
      take_line(line, events);
    }
  }
  return events;
}

void SseReframer::take_line(std::string_view line, std::vector<StreamEvent>& events) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return dispatch(events);
  if (line.front() == ':') return;  // a comment (keep-alive)
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;  // event:, id:, retry: say nothing chatflow uses
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

void SseReframer::dispatch(std::vector<StreamEvent>& events) {
  if (!has_data_) return;
  std::string data = std::move(data_);
  data_.clear();
  has_data_ = false;
  if (data == "[DONE]") {
    StreamEvent done;
    done.kind = StreamEvent::Kind::done;
    events.push_back(std::move(done));
    ended_ = true;
    return;
  }
  StreamEvent event = parse_stream_object(data);
  ended_ = event.kind == StreamEvent::Kind::error;
  events.push_back(std::move(event));
}

}  // namespace chatflow::upstream
