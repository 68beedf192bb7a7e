// JSON in and out: request data as template values, and transformers' tojson filter, which is
// Python's json.dumps(value, ensure_ascii=False, ...) rather than jinja2's HTML-safe one.
#pragma once

#include <optional>
#include <string>

#include <boost/json/value.hpp>

#include "framework/text/jinja/value.h"

namespace chatflow::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;          // json.dumps' indent as its string; none: one line
  std::optional<std::string> item_separator;  // default ", " (",\n" style with indent)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};

// Throws RenderError (TypeError) for values JSON cannot hold, as json.dumps does.
std::string dump_json(const Value& value, const JsonDumpOptions& options);

// Request data: every string is data, never template text.
Value from_json(const boost::json::value& json);

}  // namespace chatflow::jinja
