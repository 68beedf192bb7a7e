#include "framework/tools/json_rpc.h"

namespace chatflow::tools::jsonrpc {
namespace json = boost::json;

std::string request(int64_t id, std::string_view method, json::object params) {
  json::object message{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
  message["params"] = std::move(params);
  return json::serialize(message);
}

std::string notification(std::string_view method, json::object params) {
  json::object message{{"jsonrpc", "2.0"}, {"method", method}};
  if (!params.empty()) message["params"] = std::move(params);
  return json::serialize(message);
}

std::string response(const json::value& id, json::value result) {
  json::object message{{"jsonrpc", "2.0"}, {"id", id}};
  message["result"] = std::move(result);
  return json::serialize(message);
}

std::string error_response(const json::value& id, int64_t code, std::string_view text) {
  json::object message{{"jsonrpc", "2.0"}, {"id", id}};
  message["error"] = json::object{{"code", code}, {"message", text}};
  return json::serialize(message);
}

std::optional<Message> read_message(const json::value& value, std::string& error) {
  const json::object* object = value.if_object();
  if (object == nullptr) {
    error = "a JSON-RPC message is an object";
    return std::nullopt;
  }
  const json::value* version = object->if_contains("jsonrpc");
  if (version == nullptr || *version != "2.0") {
    error = "the message has no \"jsonrpc\": \"2.0\"";
    return std::nullopt;
  }
  Message message;
  const json::value* id = object->if_contains("id");
  if (const json::value* method = object->if_contains("method")) {
    if (!method->is_string()) {
      error = "the message's \"method\" is not a string";
      return std::nullopt;
    }
    message.method = std::string(method->as_string());
    message.kind = id != nullptr ? Message::Kind::request : Message::Kind::notification;
    if (id != nullptr) message.id = *id;
    if (const json::value* params = object->if_contains("params")) message.params = *params;
    return message;
  }
  if (id == nullptr) {
    error = "the message has neither a \"method\" nor an \"id\"";
    return std::nullopt;
  }
  message.kind = Message::Kind::response;
  message.id = *id;
  if (const json::value* result = object->if_contains("result")) {
    message.result = *result;
    return message;
  }
  const json::value* failure = object->if_contains("error");
  if (failure == nullptr || !failure->is_object()) {
    error = "the response has neither a \"result\" nor an \"error\" object";
    return std::nullopt;
  }
  message.failed = true;
  const json::object& details = failure->as_object();
  if (const json::value* code = details.if_contains("code"); code && code->is_int64())
    message.error_code = code->as_int64();
  if (const json::value* text = details.if_contains("message"); text && text->is_string())
    message.error_message = std::string(text->as_string());
  return message;
}

std::optional<std::vector<Message>> read_messages(std::string_view text, std::string& error) {
  json::error_code parse_error;
  json::value value = json::parse(text, parse_error);
  if (parse_error) {
    error = "not JSON (" + parse_error.message() + "): '" + quote_start(text) + "'";
    return std::nullopt;
  }
  std::vector<Message> messages;
  auto add = [&](const json::value& item) {
    std::string why;
    auto message = read_message(item, why);
    if (!message) {
      error = "not a JSON-RPC 2.0 message (" + why + "): '" + quote_start(text) + "'";
      return false;
    }
    messages.push_back(std::move(*message));
    return true;
  };
  if (const json::array* batch = value.if_array()) {
    for (const auto& item : *batch)
      if (!add(item)) return std::nullopt;
  } else if (!add(value)) {
    return std::nullopt;
  }
  return messages;
}

std::vector<std::string> event_stream_data(std::string_view body) {
  std::vector<std::string> events;
  std::string data;
  bool has_data = false;
  auto dispatch = [&] {
    if (has_data) events.push_back(data);
    data.clear();
    has_data = false;
  };
  size_t at = 0;
  while (at <= body.size()) {
    size_t end = body.find('\n', at);
    if (end == std::string_view::npos) end = body.size();
    std::string_view line = body.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      dispatch();
    } else if (line.substr(0, 5) == "data:") {
      std::string_view value = line.substr(5);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (has_data) data += '\n';
      data += value;
      has_data = true;
    }
    if (end == body.size()) break;
    at = end + 1;
  }
  dispatch();  // a last event the stream ended without a blank line after
  return events;
}

std::string quote_start(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  return std::string(text.substr(0, limit)) + "...";
}

}  // namespace chatflow::tools::jsonrpc
