#include "framework/text/jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <boost/json.hpp>

#include "framework/text/jinja/render_budget.h"
#include "framework/text/jinja/string_functions.h"

namespace chatflow::jinja {
namespace {

void append_json_string(std::string& out, std::string_view text, bool ensure_ascii) {
  out += '"';
  size_t offset = 0;
  while (offset < text.size()) {
    size_t start = offset;
    uint32_t c = next_code_point(text, offset);
    char escape[16];
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        uint32_t v = c - 0x10000;
        std::snprintf(escape, sizeof escape, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                      0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(escape, sizeof escape, "\\u%04x", c);
      }
      out += escape;
    } else {
      out.append(text.substr(start, offset - start));
    }
  }
  out += '"';
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {
    item_separator_ = options.item_separator.value_or(options.indent ? "," : ", ");
    key_separator_ = options.key_separator.value_or(": ");
  }

  void write(const Value& value, int level) {
    if (value.is_none()) {
      out_ += "null";
    } else if (value.is_bool()) {
      out_ += value.as_bool() ? "true" : "false";
    } else if (value.is_int()) {
      out_ += std::to_string(value.as_int());
    } else if (value.is_float()) {
      double number = value.as_float();
      if (std::isnan(number))
        out_ += "NaN";
      else if (std::isinf(number))
        out_ += number > 0 ? "Infinity" : "-Infinity";
      else
        out_ += python_float_repr(number);
    } else if (value.is_string()) {
      append_json_string(out_, value.as_string(), options_.ensure_ascii);
    } else if (value.is_list() && value.as_list().iterator_type.empty()) {
      const auto& items = value.as_list().items;
      if (items.empty()) {
        out_ += "[]";
        return;
      }
      out_ += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out_ += item_separator_;
        newline(level + 1);
        write(items[i], level + 1);
      }
      newline(level);
      out_ += ']';
    } else if (value.is_dict()) {
      write_dict(value.as_dict(), level);
    } else {
      raise_type_error("Object of type " + type_name(value) + " is not JSON serializable");
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (!options_.indent) return;
    RenderBudget::check_bytes(out_.size() + 1 +
                              options_.indent->size() * static_cast<size_t>(level));
    out_ += '\n';
    for (int i = 0; i < level; ++i)
      out_ += *options_.indent;
  }

  std::string key_text(const Value& key) {
    if (key.is_string()) return key.as_string();
    if (key.is_bool()) return key.as_bool() ? "true" : "false";
    if (key.is_none()) return "null";
    if (key.is_int()) return std::to_string(key.as_int());
    if (key.is_float()) return python_float_repr(key.as_float());
    raise_type_error("keys must be str, int, float, bool or None, not " + type_name(key));
  }

  void write_dict(const Dict& dict, int level) {
    if (dict.entries.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& entry : dict.entries)
      entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
        return compare(a->first, b->first) < 0;
      });
    }
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out_ += item_separator_;
      newline(level + 1);
      append_json_string(out_, key_text(entries[i]->first), options_.ensure_ascii);
      out_ += key_separator_;
      write(entries[i]->second, level + 1);
    }
    newline(level);
    out_ += '}';
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
  std::string out_;
};

}  // namespace

std::string dump_json(const Value& value, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  writer.write(value, 0);
  return writer.take();
}

Value from_json(const boost::json::value& json) {
  switch (json.kind()) {
    case boost::json::kind::null:
      return Value(None{});
    case boost::json::kind::bool_:
      return Value(json.get_bool());
    case boost::json::kind::int64:
      return Value(json.get_int64());
    case boost::json::kind::uint64:
      return Value(static_cast<int64_t>(json.get_uint64()));
    case boost::json::kind::double_:
      return Value(json.get_double());
    case boost::json::kind::string:
      return Value::data_string(std::string(json.get_string()));
    case boost::json::kind::array: {
      List list;
      list.items.reserve(json.get_array().size());
      for (const auto& item : json.get_array())
        list.items.push_back(from_json(item));
      return Value(std::move(list));
    }
    case boost::json::kind::object: {
      Dict dict;
      dict.entries.reserve(json.get_object().size());
      for (const auto& [key, item] : json.get_object())
        dict.entries.emplace_back(Value::data_string(std::string(key)), from_json(item));
      return Value(std::move(dict));
    }
  }
  return Value(None{});
}

}  // namespace chatflow::jinja
