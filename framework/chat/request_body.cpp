#include "framework/chat/request_body.h"

#include <algorithm>
#include <cmath>

#include "framework/text/utf8.h"

namespace chatflow::chat::request_body {
namespace json = boost::json;
namespace {

std::string format(double value) {
  std::string text = std::to_string(value);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

}  // namespace

void invalid(const std::string& message, const std::string& param, const std::string& code) {
  throw RequestFailure(RequestError{400, "invalid_request_error", message, code, param});
}

const char* kind_of(const json::value& value) {
  switch (value.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
      return "an integer";
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "a value";
}

const json::object& object_at(const json::value& value, const std::string& param) {
  if (!value.is_object())
    invalid("'" + param + "' must be an object, got " + kind_of(value), param);
  return value.get_object();
}

json::value parse_object(std::string_view body) {
  if (auto offset = text::first_invalid_byte(body)) {
    invalid("the body is not valid UTF-8 (at byte " + std::to_string(*offset) + ")");
  }
  json::parse_options options;
  options.max_depth = 64;  // a nesting bomb is an error, not a stack overflow
  std::error_code error;
  json::value document =
      json::parse(json::string_view(body.data(), body.size()), error,
                  json::make_shared_resource<json::monotonic_resource>(), options);
  if (error) invalid("the body is not valid JSON: " + error.message());
  if (!document.is_object())
    invalid(std::string("the body must be a JSON object, got ") + kind_of(document));
  return document;
}

const json::value* Fields::get(std::string_view name) const {
  read_.emplace(name);
  auto found = object_.find(name);
  return found == object_.end() || found->value().is_null() ? nullptr : &found->value();
}

void Fields::refuse_unread(std::initializer_list<std::string_view> ignored) const {
  for (const auto& entry : object_) {
    std::string_view name = entry.key();
    if (entry.value().is_null() || read_.count(name) ||
        std::find(ignored.begin(), ignored.end(), name) != ignored.end()) {
      continue;
    }
    throw RequestFailure(RequestError{400, "invalid_request_error",
                                      "'" + path(name) +
                                          "' is not supported by this server; "
                                          "remove it",
                                      "unsupported_parameter", path(name)});
  }
}

double Fields::number(std::string_view name, double fallback, double minimum,
                      double maximum) const {
  const json::value* value = get(name);
  if (!value) return fallback;
  if (!value->is_number())
    invalid("'" + path(name) + "' must be a number, got " + kind_of(*value), path(name));
  double number = value->to_number<double>();
  if (!std::isfinite(number) || number < minimum || number > maximum) {
    invalid("'" + path(name) + "' must be between " + format(minimum) + " and " + format(maximum) +
                ", got " + format(number),
            path(name));
  }
  return number;
}

std::optional<int64_t> Fields::optional_integer(std::string_view name, int64_t minimum,
                                                int64_t maximum) const {
  const json::value* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_int64() && !value->is_uint64())
    invalid("'" + path(name) + "' must be an integer, got " + kind_of(*value), path(name));
  if (value->is_uint64() && value->get_uint64() > static_cast<uint64_t>(maximum))
    invalid("'" + path(name) + "' must be at most " + std::to_string(maximum), path(name));
  int64_t number =
      value->is_int64() ? value->get_int64() : static_cast<int64_t>(value->get_uint64());
  if (number < minimum || number > maximum) {
    invalid("'" + path(name) + "' must be between " + std::to_string(minimum) + " and " +
                std::to_string(maximum) + ", got " + std::to_string(number),
            path(name));
  }
  return number;
}

bool Fields::boolean(std::string_view name, bool fallback) const {
  const json::value* value = get(name);
  if (!value) return fallback;
  if (!value->is_bool())
    invalid("'" + path(name) + "' must be a boolean, got " + kind_of(*value), path(name));
  return value->get_bool();
}

std::string Fields::string(std::string_view name, const std::string& fallback) const {
  const json::value* value = get(name);
  if (!value) return fallback;
  if (!value->is_string())
    invalid("'" + path(name) + "' must be a string, got " + kind_of(*value), path(name));
  return std::string(value->get_string());
}

const json::array* Fields::array(std::string_view name) const {
  const json::value* value = get(name);
  if (!value) return nullptr;
  if (!value->is_array())
    invalid("'" + path(name) + "' must be an array, got " + kind_of(*value), path(name));
  return &value->get_array();
}

}  // namespace chatflow::chat::request_body
