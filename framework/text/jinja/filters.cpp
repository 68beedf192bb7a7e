// The filters of `value|name(...)`: jinja2's built-ins, with transformers' tojson.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>
#include <utility>

#include "framework/text/jinja/builtins.h"
#include "framework/text/jinja/filter_functions.h"
#include "framework/text/jinja/interpreter.h"
#include "framework/text/jinja/json.h"
#include "framework/text/jinja/render_budget.h"
#include "framework/text/jinja/string_format.h"
#include "framework/text/jinja/string_functions.h"

namespace chatflow::jinja {
namespace filters {

Value argument(const Arguments& arguments, size_t index, std::string_view name, Value fallback) {
  return arguments.get(index, name, fallback);
}

std::string string_argument(const Arguments& arguments, size_t index, std::string_view name,
                            std::string fallback) {
  const Value* value = arguments.find(index, name);
  return value ? to_text(*value) : fallback;
}

int64_t integer_argument(const Arguments& arguments, size_t index, std::string_view name,
                         int64_t fallback) {
  const Value* value = arguments.find(index, name);
  if (!value) return fallback;
  if (value->is_int()) return value->as_int();
  if (value->is_bool()) return value->as_bool();
  if (value->is_float()) return static_cast<int64_t>(value->as_float());
  raise_type_error("'" + type_name(*value) + "' object cannot be interpreted as an integer");
}

// jinja2's attribute paths: "a.b.0" looks up a, then b, then item 0.
Value attribute_path(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    current = get_item(current, numeric ? Value(static_cast<int64_t>(std::stoll(part)))
                                        : Value::data_string(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

// For sorting and uniqueness: strings folded to lower case unless case-sensitive.
Value sort_key(const Value& value, bool case_sensitive) {
  if (!case_sensitive && value.is_string()) return Value(lower(value.as_tracked()));
  return value;
}

}  // namespace filters

namespace {

using filters::argument;
using filters::attribute_path;
using filters::integer_argument;
using filters::sort_key;
using filters::string_argument;

// Markup's own methods (upper, strip, replace, ...) return Markup.
Value keep_markup(const Value& operand, TrackedString result) {
  result.set_markup(operand.is_string() && operand.as_tracked().is_markup());
  return Value(std::move(result));
}

Value filter_trim(const Value& v, const Arguments& a) {
  const Value* chars = a.find(0, "chars");
  std::string characters = chars && !chars->is_none() ? to_text(*chars) : "";
  return keep_markup(
      v, strip(to_tracked(v), chars && !chars->is_none() ? &characters : nullptr, StripSide::both));
}
Value filter_upper(const Value& v, const Arguments&) {
  return keep_markup(v, upper(to_tracked(v)));
}
Value filter_lower(const Value& v, const Arguments&) {
  return keep_markup(v, lower(to_tracked(v)));
}
Value filter_title(const Value& v, const Arguments&) {
  return Value(jinja_title(to_tracked(v)));
}
Value filter_capitalize(const Value& v, const Arguments&) {
  return Value(capitalize(to_tracked(v)));
}
Value filter_string(const Value& v, const Arguments&) {
  return Value(to_tracked(v));
}
Value filter_safe(const Value& v, const Arguments&) {
  TrackedString text = to_tracked(v);
  text.set_markup(true);
  return Value(std::move(text));
}

Value filter_length(const Value& v, const Arguments&) {
  auto size = length(v);
  if (!size) raise_type_error("object of type '" + type_name(v) + "' has no len()");
  return Value(static_cast<int64_t>(*size));
}

Value filter_replace(const Value& v, const Arguments& a) {
  TrackedString text = to_tracked(v);
  Value old_text = argument(a, 0, "old", Value::data_string(""));
  Value new_text = argument(a, 1, "new", Value::data_string(""));
  const Value* count = a.find(2, "count");
  int64_t limit = count && !count->is_none() ? integer_argument(a, 2, "count", -1) : -1;
  return Value(replace(text, to_text(old_text), to_tracked(new_text), limit));
}

Value filter_join(const Value& v, const Arguments& a) {
  TrackedString separator = to_tracked(argument(a, 0, "d", Value::template_string("")));
  const Value* attribute = a.find(1, "attribute");
  TrackedString out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out.append(separator);
    first = false;
    out.append(to_tracked(
        attribute && !attribute->is_none() ? attribute_path(item, to_text(*attribute)) : item));
  }
  return Value(std::move(out));
}

Value filter_default(const Value& v, const Arguments& a) {
  bool boolean = truthy(argument(a, 1, "boolean", Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v)))
    return argument(a, 0, "default_value", Value::template_string(""));
  return v;
}

Value filter_first(const Value& v, const Arguments&) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value filter_last(const Value& v, const Arguments&) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value filter_list(const Value& v, const Arguments&) {
  List list;
  list.items = iterate(v);
  return Value(std::move(list));
}

Value filter_int(const Value& v, const Arguments& a) {
  if (v.is_undefined()) raise_undefined(v);  // int(Undefined) raises
  Value fallback = argument(a, 0, "default", Value(int64_t{0}));
  int64_t base = integer_argument(a, 1, "base", 10);
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.as_bool()});
  if (v.is_float()) return Value(static_cast<int64_t>(std::trunc(v.as_float())));
  if (v.is_string()) {
    std::string text = strip(v.as_tracked(), nullptr, StripSide::both).text();
    // Python's int() takes single underscores between digits.
    for (size_t i = 1; i + 1 < text.size(); ++i) {
      if (text[i] == '_' && std::isalnum(static_cast<unsigned char>(text[i - 1])) &&
          std::isalnum(static_cast<unsigned char>(text[i + 1])))
        text.erase(i, 1);
    }
    try {
      size_t used = 0;
      int64_t parsed = std::stoll(text, &used, static_cast<int>(base));
      if (used == text.size()) return Value(parsed);
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      double parsed = std::stod(text, &used);
      if (used == text.size() && std::isfinite(parsed))
        return Value(static_cast<int64_t>(std::trunc(parsed)));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value filter_float(const Value& v, const Arguments& a) {
  if (v.is_undefined()) raise_undefined(v);
  Value fallback = argument(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_number());
  if (v.is_string()) {
    std::string text = strip(v.as_tracked(), nullptr, StripSide::both).text();
    try {
      size_t used = 0;
      double parsed = std::stod(text, &used);
      if (used == text.size()) return Value(parsed);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

// Python's round(): halves to even.
double round_half_even(double value, int64_t precision) {
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = value * scale;
  double rounded = std::nearbyint(scaled);
  return rounded / scale;
}

Value filter_round(const Value& v, const Arguments& a) {
  int64_t precision = integer_argument(a, 0, "precision", 0);
  std::string method = string_argument(a, 1, "method", "common");
  if (!v.is_number()) raise_type_error("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) return Value(v.is_bool() ? int64_t{v.as_bool()} : v.as_int());
    return Value(round_half_even(v.as_float(), precision));
  }
  if (method != "floor" && method != "ceil")
    throw RenderError(RenderError::Kind::template_error,
                      "method must be 'common', 'ceil' or 'floor'");
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = v.as_number() * scale;
  return Value((method == "floor" ? std::floor(scaled) : std::ceil(scaled)) / scale);
}

Value filter_abs(const Value& v, const Arguments&) {
  if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_bool()) return Value(int64_t{v.as_bool()});
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  raise_type_error("bad operand type for abs(): '" + type_name(v) + "'");
}

Value filter_tojson(const Value& v, const Arguments& a) {
  JsonDumpOptions options;
  options.ensure_ascii = truthy(argument(a, 0, "ensure_ascii", Value(false)));
  Value indent = argument(a, 1, "indent", Value(None{}));
  if (indent.is_int()) {
    auto width = static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0));
    RenderBudget::check_bytes(width);
    options.indent = std::string(width, ' ');
  } else if (indent.is_string())
    options.indent = indent.as_string();
  else if (!indent.is_none())
    raise_type_error("indent must be an int or a str");
  Value separators = argument(a, 2, "separators", Value(None{}));
  if (separators.is_list() && separators.as_list().items.size() == 2) {
    options.item_separator = to_text(separators.as_list().items[0]);
    options.key_separator = to_text(separators.as_list().items[1]);
  }
  options.sort_keys = truthy(argument(a, 3, "sort_keys", Value(false)));
  return Value::data_string(dump_json(v, options));
}

Value filter_indent(const Value& v, const Arguments& a) {
  Value width = argument(a, 0, "width", Value(int64_t{4}));
  bool first = truthy(argument(a, 1, "first", Value(false)));
  bool blank = truthy(argument(a, 2, "blank", Value(false)));
  auto spaces = width.is_string()
                    ? size_t{0}
                    : static_cast<size_t>(std::max<int64_t>(integer_argument(a, 0, "width", 4), 0));
  RenderBudget::check_bytes(spaces);
  TrackedString indentation = width.is_string()
                                  ? width.as_tracked()
                                  : TrackedString::from_template(std::string(spaces, ' '));
  if (v.is_undefined()) raise_undefined(v);
  if (!v.is_string())
    raise_type_error("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  TrackedString text = v.as_tracked();
  text.append("\n", true);  // as jinja2 does, so that splitlines sees a final line
  std::vector<TrackedString> lines = split_lines(text, false);
  TrackedString out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out.append("\n", true);
    if (i > 0 && (blank || !lines[i].empty())) out.append(indentation);
    out.append(lines[i]);
  }
  if (first) {
    TrackedString prefixed = indentation;
    prefixed.append(out);
    return Value(std::move(prefixed));
  }
  return Value(std::move(out));
}

Value filter_escape(const Value& v, const Arguments&) {
  return Value(html_escape(to_tracked(v)));
}

Value filter_forceescape(const Value& v, const Arguments&) {
  TrackedString text = to_tracked(v);
  text.set_markup(false);
  return Value(html_escape(text));
}

Value filter_format(const Value& v, const Arguments& a) {
  if (!a.keyword.empty()) {
    Dict mapping;
    for (const auto& [key, value] : a.keyword)
      mapping.set(Value::data_string(key), value);
    return Value(percent_format(to_tracked(v), Value(std::move(mapping))));
  }
  return Value(percent_format(to_tracked(v), Value(List{a.positional, true, {}, {}})));
}

Value filter_center(const Value& v, const Arguments& a) {
  std::string text = to_text(v);
  int64_t width = integer_argument(a, 0, "width", 80);
  auto size = static_cast<int64_t>(code_point_count(text));
  if (size >= width) return Value(to_tracked(v));
  int64_t missing = width - size;
  RenderBudget::check_bytes(text.size() + static_cast<size_t>(missing));
  // Python's str.center puts the odd space on the left when the width is odd.
  int64_t left = missing / 2 + (missing & width & 1);
  TrackedString out = TrackedString::from_data(std::string(static_cast<size_t>(left), ' '));
  out.append(to_tracked(v));
  out.append(std::string(static_cast<size_t>(missing - left), ' '), false);
  return Value(std::move(out));
}

Value filter_truncate(const Value& v, const Arguments& a) {
  if (!v.is_string()) {
    // jinja2 takes len() of whatever it is given.
    auto size = length(v);
    if (!size) raise_type_error("object of type '" + type_name(v) + "' has no len()");
    if (static_cast<int64_t>(*size) <=
        integer_argument(a, 0, "length", 255) + integer_argument(a, 3, "leeway", 5))
      return v;
  }
  TrackedString text = to_tracked(v);
  int64_t limit = integer_argument(a, 0, "length", 255);
  bool killwords = truthy(argument(a, 1, "killwords", Value(false)));
  TrackedString end = to_tracked(argument(a, 2, "end", Value::template_string("...")));
  int64_t leeway = integer_argument(a, 3, "leeway", 5);
  auto end_length = static_cast<int64_t>(code_point_count(end.text()));
  if (limit < end_length) {
    throw RenderError(
        RenderError::Kind::template_error,
        "expected length >= " + std::to_string(end_length) + ", got " + std::to_string(limit));
  }
  if (leeway < 0) {
    throw RenderError(RenderError::Kind::template_error,
                      "expected leeway >= 0, got " + std::to_string(leeway));
  }
  auto offsets = code_point_offsets(text.text());
  auto size = static_cast<int64_t>(offsets.size() - 1);
  if (size <= limit + leeway) return Value(text);
  int64_t keep = std::max<int64_t>(limit - static_cast<int64_t>(code_point_count(end.text())), 0);
  TrackedString head = text.slice(0, offsets[static_cast<size_t>(std::min(keep, size))]);
  if (!killwords) {
    size_t space = head.text().rfind(' ');
    if (space != std::string::npos) head = head.slice(0, space);
  }
  head.append(end);
  return Value(std::move(head));
}

Value filter_wordcount(const Value& v, const Arguments&) {
  std::string text = to_text(v);
  int64_t words = 0;
  bool in_word = false;
  size_t offset = 0;
  while (offset < text.size()) {
    uint32_t c = next_code_point(text, offset);
    bool word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                c == '_' || c >= 0x80;
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value(words);
}

Value filter_attr(const Value& v, const Arguments& a) {
  std::string name = string_argument(a, 0, "name", "");
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_object()) {
    if (auto value = v.as_object().attribute(name)) return *value;
  } else if (v.is_string() || v.is_list() || v.is_dict()) {
    Value method = get_attribute(v, name);
    // attr() reads attributes only, never dict keys.
    if (method.is_callable() || (method.is_undefined() && method.as_undefined().unsafe))
      return method;
  }
  return Value::undefined("'" + type_description(v) + "' has no attribute '" + name + "'");
}

}  // namespace

FilterFunction find_filter(std::string_view name) {
  static const std::pair<std::string_view, FilterFunction> filters[] = {
      {"trim", filter_trim},
      {"upper", filter_upper},
      {"lower", filter_lower},
      {"title", filter_title},
      {"capitalize", filter_capitalize},
      {"string", filter_string},
      {"safe", filter_safe},
      {"length", filter_length},
      {"count", filter_length},
      {"replace", filter_replace},
      {"join", filter_join},
      {"default", filter_default},
      {"d", filter_default},
      {"first", filter_first},
      {"last", filter_last},
      {"list", filter_list},
      {"items", filters::filter_items},
      {"int", filter_int},
      {"float", filter_float},
      {"round", filter_round},
      {"abs", filter_abs},
      {"tojson", filter_tojson},
      {"indent", filter_indent},
      {"map", filters::filter_map},
      {"select", filters::filter_select},
      {"reject", filters::filter_reject},
      {"selectattr", filters::filter_selectattr},
      {"rejectattr", filters::filter_rejectattr},
      {"unique", filters::filter_unique},
      {"reverse", filters::filter_reverse},
      {"sort", filters::filter_sort},
      {"dictsort", filters::filter_dictsort},
      {"sum", filters::filter_sum},
      {"max", filters::filter_max},
      {"min", filters::filter_min},
      {"escape", filter_escape},
      {"e", filter_escape},
      {"forceescape", filter_forceescape},
      {"format", filter_format},
      {"center", filter_center},
      {"truncate", filter_truncate},
      {"wordcount", filter_wordcount},
      {"batch", filters::filter_batch},
      {"attr", filter_attr},
      {"groupby", filters::filter_groupby},
  };
  for (const auto& [filter_name, function] : filters) {
    if (filter_name == name) return function;
  }
  return nullptr;
}

}  // namespace chatflow::jinja
