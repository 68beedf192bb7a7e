#include "framework/text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "framework/text/jinja/render_budget.h"

namespace chatflow::jinja {

const Value* Dict::find(const Value& key) const {
  for (const auto& [entry_key, entry_value] : entries) {
    if (equal(entry_key, key)) return &entry_value;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [entry_key, entry_value] : entries) {
    if (entry_key.is_string() && entry_key.as_string() == key) return &entry_value;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& entry : entries) {
    if (equal(entry.first, key)) {
      entry.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* Arguments::find(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

Value Arguments::get(size_t index, std::string_view name, const Value& fallback) const {
  const Value* found = find(index, name);
  return found ? *found : fallback;
}

Value make_iterator(std::vector<Value> items, std::string iterator_type) {
  List list;
  list.items = std::move(items);
  list.iterator_type = std::move(iterator_type);
  return Value(std::move(list));
}

Value make_failing_generator(const RenderError& error) {
  List list;
  list.iterator_type = "generator";
  list.deferred_error = std::make_shared<const RenderError>(error);
  return Value(std::move(list));
}

Value::Value(TrackedString s) {
  RenderBudget::check_bytes(s.size());
  data_ = std::make_shared<const TrackedString>(std::move(s));
}

Value::Value(List list) {
  RenderBudget::check_bytes(list.items.size() * kItemBytes);
  int deepest = 0;
  for (const Value& item : list.items)
    deepest = std::max(deepest, nesting_of(item));
  list.nesting = deepest + 1;
  RenderBudget::check_nesting(list.nesting);
  data_ = std::make_shared<const List>(std::move(list));
}

Value::Value(Dict dict) {
  RenderBudget::check_bytes(dict.entries.size() * 2 * kItemBytes);
  int deepest = 0;
  for (const auto& [key, value] : dict.entries)
    deepest = std::max({deepest, nesting_of(key), nesting_of(value)});
  dict.nesting = deepest + 1;
  RenderBudget::check_nesting(dict.nesting);
  data_ = std::make_shared<const Dict>(std::move(dict));
}

int nesting_of(const Value& value) {
  if (value.is_list()) return value.as_list().nesting;
  if (value.is_dict()) return value.as_dict().nesting;
  if (value.is_object()) return value.as_object().nesting();
  return 0;
}

Value Value::undefined(std::string message) {
  return Value(Undefined{std::make_shared<const std::string>(std::move(message))});
}

double Value::as_number() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

void raise_type_error(const std::string& message) {
  throw RenderError(RenderError::Kind::type, message);
}

void raise_undefined(const Value& undefined) {
  const Undefined& info = undefined.as_undefined();
  std::string message = info.message ? *info.message : "value is undefined";
  throw RenderError(info.unsafe ? RenderError::Kind::security : RenderError::Kind::undefined,
                    message);
}

bool truthy(const Value& value) {
  switch (value.data().index()) {
    case 0:
    case 1:
      return false;
    case 2:
      return value.as_bool();
    case 3:
      return value.as_int() != 0;
    case 4:
      return value.as_float() != 0.0;
    case 5:
      return !value.as_string().empty();
    case 6:
      if (!value.as_list().iterator_type.empty() &&
          value.as_list().iterator_type.rfind("dict_", 0) != 0)
        return true;
      return !value.as_list().items.empty();
    case 7:
      return !value.as_dict().entries.empty();
    default:
      return true;
  }
}

bool equal(const Value& left, const Value& right) {
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return left.as_number() == right.as_number();
    auto integer = [](const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); };
    return integer(left) == integer(right);
  }
  if (left.data().index() != right.data().index()) return false;
  if (left.is_undefined() || left.is_none()) return true;
  if (left.is_string()) return left.as_string() == right.as_string();
  if (left.is_list()) {
    const List& a = left.as_list();
    const List& b = right.as_list();
    if (a.tuple != b.tuple || a.iterator_type != b.iterator_type || !a.iterator_type.empty() ||
        a.items.size() != b.items.size())
      return &a == &b;
    for (size_t i = 0; i < a.items.size(); ++i) {
      if (!equal(a.items[i], b.items[i])) return false;
    }
    return true;
  }
  if (left.is_dict()) {
    const Dict& a = left.as_dict();
    const Dict& b = right.as_dict();
    if (a.entries.size() != b.entries.size()) return false;
    for (const auto& [key, value] : a.entries) {
      const Value* other = b.find(key);
      if (!other || !equal(value, *other)) return false;
    }
    return true;
  }
  if (left.is_callable()) return &left.as_callable() == &right.as_callable();
  if (left.is_object()) return &left.as_object() == &right.as_object();
  return false;
}

int compare(const Value& left, const Value& right) {
  if (left.is_number() && right.is_number()) {
    if (!left.is_float() && !right.is_float()) {
      auto integer = [](const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); };
      int64_t a = integer(left), b = integer(right);
      return a < b ? -1 : (a > b ? 1 : 0);
    }
    double a = left.as_number(), b = right.as_number();
    return a < b ? -1 : (a > b ? 1 : 0);
  }
  if (left.is_string() && right.is_string()) {
    int result = left.as_string().compare(right.as_string());
    return result < 0 ? -1 : (result > 0 ? 1 : 0);
  }
  if (left.is_list() && right.is_list() && left.as_list().tuple == right.as_list().tuple &&
      left.as_list().iterator_type.empty() && right.as_list().iterator_type.empty()) {
    const auto& a = left.as_list().items;
    const auto& b = right.as_list().items;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!equal(a[i], b[i])) return compare(a[i], b[i]);
    }
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  }
  if (left.is_undefined()) raise_undefined(left);
  if (right.is_undefined()) raise_undefined(right);
  raise_type_error("'<' not supported between instances of '" + type_name(left) + "' and '" +
                   type_name(right) + "'");
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  // d.ddde±XX: split into sign, digits and the decimal exponent.
  size_t e = scientific.find('e');
  std::string mantissa = scientific.substr(0, e);
  int exponent = std::stoi(scientific.substr(e + 1));
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exponent_text[16];
    std::snprintf(exponent_text, sizeof exponent_text, "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + exponent_text;
  }
  if (exponent < 0) {
    return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  }
  size_t integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) {
    return out + digits + std::string(integer_digits - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
}

namespace {

std::string string_repr(std::string_view text) {
  bool has_single = text.find('\'') != std::string_view::npos;
  bool has_double = text.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : text) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

}  // namespace

std::string repr(const Value& value) {
  if (value.is_string()) return string_repr(value.as_string());
  if (value.is_list() && !value.as_list().iterator_type.empty()) {
    const List& list = value.as_list();
    if (list.iterator_type.rfind("dict_", 0) != 0) return "<" + list.iterator_type + " object>";
    std::string out = list.iterator_type + "([";
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i) out += ", ";
      out += repr(list.items[i]);
    }
    return out + "])";
  }
  if (value.is_list()) {
    const List& list = value.as_list();
    std::string out = list.tuple ? "(" : "[";
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i) out += ", ";
      out += repr(list.items[i]);
    }
    if (list.tuple && list.items.size() == 1) out += ",";
    return out + (list.tuple ? ")" : "]");
  }
  if (value.is_dict()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, item] : value.as_dict().entries) {
      if (!first) out += ", ";
      first = false;
      out += repr(key) + ": " + repr(item);
    }
    return out + "}";
  }
  return to_text(value);
}

std::string to_text(const Value& value) {
  switch (value.data().index()) {
    case 0:
      return "";
    case 1:
      return "None";
    case 2:
      return value.as_bool() ? "True" : "False";
    case 3:
      return std::to_string(value.as_int());
    case 4:
      return python_float_repr(value.as_float());
    case 5:
      return value.as_string();
    case 6:
    case 7:
      return repr(value);
    case 8:
      return "<function " + value.as_callable().name + ">";
    default:
      return "<" + std::string(value.as_object().type_name()) + " object>";
  }
}

TrackedString to_tracked(const Value& value) {
  if (value.is_string()) return value.as_tracked();
  return TrackedString::from_data(to_text(value));
}

std::string type_name(const Value& value) {
  switch (value.data().index()) {
    case 0:
      return "Undefined";
    case 1:
      return "NoneType";
    case 2:
      return "bool";
    case 3:
      return "int";
    case 4:
      return "float";
    case 5:
      return "str";
    case 6:
      if (!value.as_list().iterator_type.empty()) return value.as_list().iterator_type;
      return value.as_list().tuple ? "tuple" : "list";
    case 7:
      return "dict";
    case 8:
      return "function";
    default:
      return std::string(value.as_object().type_name());
  }
}

std::string type_description(const Value& value) {
  if (value.is_none()) return "None";
  return type_name(value) + " object";
}

size_t code_point_count(std::string_view text) {
  size_t count = 0;
  for (unsigned char c : text)
    count += (c & 0xC0) != 0x80;
  return count;
}

std::vector<size_t> code_point_offsets(std::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(text.size());
  return offsets;
}

std::vector<Value> iterate(const Value& value) {
  if (value.is_list()) {
    if (value.as_list().deferred_error) throw *value.as_list().deferred_error;
    return value.as_list().items;
  }
  if (value.is_dict()) {
    std::vector<Value> keys;
    keys.reserve(value.as_dict().entries.size());
    for (const auto& entry : value.as_dict().entries)
      keys.push_back(entry.first);
    return keys;
  }
  if (value.is_string()) {
    const TrackedString& text = value.as_tracked();
    std::vector<size_t> offsets = code_point_offsets(text.text());
    std::vector<Value> characters;
    for (size_t i = 0; i + 1 < offsets.size(); ++i)
      characters.emplace_back(text.slice(offsets[i], offsets[i + 1]));
    return characters;
  }
  if (value.is_undefined()) return {};
  raise_type_error("'" + type_name(value) + "' object is not iterable");
}

std::optional<size_t> length(const Value& value) {
  if (value.is_string()) return code_point_count(value.as_string());
  if (value.is_list()) {
    const std::string& kind = value.as_list().iterator_type;
    if (!kind.empty() && kind.rfind("dict_", 0) != 0) return std::nullopt;
    return value.as_list().items.size();
  }
  if (value.is_dict()) return value.as_dict().entries.size();
  if (value.is_undefined()) return 0;
  return std::nullopt;
}

}  // namespace chatflow::jinja

namespace chatflow::jinja {

bool Object::set_attribute(std::string_view /*name*/, const Value& /*value*/) {
  return false;
}

std::optional<Value> Object::call(Arguments& /*arguments*/) {
  return std::nullopt;
}

}  // namespace chatflow::jinja
