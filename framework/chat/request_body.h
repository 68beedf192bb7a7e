// A request body as every wire format reads it: a JSON object (valid UTF-8, nested at most 64
// deep), and its members read by name, each absent or null (then a fallback) or else of the right
// type and range; a member nothing read is refused by name rather than silently ignored. Every
// refusal is a 400 invalid_request_error naming the member by its whole path.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "framework/api/request.h"

namespace chatflow::chat::request_body {

// Throws RequestFailure: 400 invalid_request_error.
[[noreturn]] void invalid(const std::string& message, const std::string& param = {},
                          const std::string& code = {});

// "a string", "an array", ...: what a value is, for error messages.
const char* kind_of(const boost::json::value& value);

// `value` as an object, or a 400 naming `param` and what it is instead.
const boost::json::object& object_at(const boost::json::value& value, const std::string& param);

// The body as a JSON object, or a 400 saying what is wrong with it.
boost::json::value parse_object(std::string_view body);

class Fields {
 public:
  // `prefix`: the object's path ("tools[0].function.").
  explicit Fields(const boost::json::object& object, std::string prefix = {})
      : object_(object), prefix_(std::move(prefix)) {}

  // The member, or nullptr when it is absent or null; either way it counts as read.
  const boost::json::value* get(std::string_view name) const;
  std::string path(std::string_view name) const { return prefix_ + std::string(name); }

  double number(std::string_view name, double fallback, double minimum, double maximum) const;
  int64_t integer(std::string_view name, int64_t fallback, int64_t minimum, int64_t maximum) const {
    return optional_integer(name, minimum, maximum).value_or(fallback);
  }
  std::optional<int64_t> optional_integer(std::string_view name, int64_t minimum,
                                          int64_t maximum) const;
  bool boolean(std::string_view name, bool fallback) const;
  std::string string(std::string_view name, const std::string& fallback) const;
  // An array member, or nullptr when absent.
  const boost::json::array* array(std::string_view name) const;

  // A member nothing read would be silently ignored: refused instead, naming it (a null counts
  // as absent). `ignored` lists members accepted for compatibility that change nothing.
  void refuse_unread(std::initializer_list<std::string_view> ignored) const;

 private:
  const boost::json::object& object_;
  std::string prefix_;
  mutable std::set<std::string, std::less<>> read_;
};

}  // namespace chatflow::chat::request_body
