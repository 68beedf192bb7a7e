#include "framework/api/config_schema.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "framework/api/suggest.h"

namespace chatflow {

std::string describe(ValueType type) {
  switch (type) {
    case ValueType::boolean:
      return "a boolean (true or false)";
    case ValueType::integer:
      return "an integer";
    case ValueType::number:
      return "a number";
    case ValueType::string:
      return "a string";
    case ValueType::string_list:
      return "a list of strings";
    case ValueType::string_map:
      return "a mapping of strings";
    case ValueType::object:
      return "a mapping";
    case ValueType::object_list:
      return "a list of mappings";
    case ValueType::any:
      return "any value";
  }
  return "a value";
}

void ParseContext::error(const SourceLocation& where, const std::string& message) const {
  diagnostics.error(where, owner.empty() ? message : owner + ": " + message);
}

const KeyInfo* ConfigSchema::find(const std::string& name) const {
  for (const auto& key : keys_) {
    if (key.name == name) return &key;
  }
  return nullptr;
}

std::shared_ptr<void> ConfigSchema::parse(const ConfigValue* mapping,
                                          const SourceLocation& owner_where,
                                          ParseContext& context) const {
  std::shared_ptr<void> config = make_default_();
  if (mapping != nullptr && !mapping->is_null() && !mapping->is_mapping()) {
    context.error(mapping->where, "expected a mapping of config keys, got " + mapping->describe());
    return config;
  }
  std::vector<std::string> known;
  for (const auto& key : keys_)
    known.push_back(key.name);

  if (mapping != nullptr && mapping->is_mapping()) {
    for (size_t i = 0; i < mapping->keys.size(); ++i) {
      const auto& name = mapping->keys[i].name;
      const KeyInfo* key = find(name);
      if (key == nullptr) {
        context.error(mapping->keys[i].where, "unknown key '" + context.key_prefix + name + "'" +
                                                  did_you_mean(name, known) +
                                                  " (known keys: " + join_names(known) + ")");
        continue;
      }
      if (mapping->items[i].interpolation_failed) continue;
      key->assign(config.get(), mapping->items[i], *key, context);
    }
  }
  for (const auto& key : keys_) {
    bool present = mapping != nullptr && mapping->is_mapping() && mapping->find(key.name);
    if (key.required && !present) {
      const SourceLocation& where =
          mapping != nullptr && !mapping->is_null() ? mapping->where : owner_where;
      context.error(where, "missing required key '" + context.key_prefix + key.name + "' (" +
                               describe(key.type) + ": " + key.doc + ")");
    }
  }
  return config;
}

namespace config_detail {
namespace {

std::string key_name(const KeyInfo& key, const ParseContext& context) {
  return "key '" + context.key_prefix + key.name + "'";
}

bool expect_scalar(const ConfigValue& value, const KeyInfo& key, ParseContext& context) {
  if (value.is_scalar()) return true;
  context.error(value.where, key_name(key, context) + " expects " + describe(key.type) + ", got " +
                                 value.describe());
  return false;
}

bool check_range(double number, const ConfigValue& value, const KeyInfo& key,
                 ParseContext& context) {
  // 1048576 and 0.00001 as written, not 1.04858e+06 and 1e-05 (ostream's default format).
  auto format = [](double bound) {
    if (std::abs(bound) < 1e15 && bound == std::floor(bound))
      return std::to_string(static_cast<long long>(bound));
    char text[32];
    return std::string(
        text, std::to_chars(text, text + sizeof text, bound, std::chars_format::fixed).ptr);
  };
  if ((key.minimum && number < *key.minimum) || (key.maximum && number > *key.maximum)) {
    std::string bounds = key.minimum && key.maximum
                             ? "between " + format(*key.minimum) + " and " + format(*key.maximum)
                         : key.minimum ? "at least " + format(*key.minimum)
                                       : "at most " + format(*key.maximum);
    context.error(value.where,
                  key_name(key, context) + " must be " + bounds + ", got " + value.text);
    return false;
  }
  return true;
}

}  // namespace

bool read_value(const ConfigValue& value, bool& out, const KeyInfo& key, ParseContext& context) {
  if (!expect_scalar(value, key, context)) return false;
  if (!value.quoted && value.text == "true") {
    out = true;
    return true;
  }
  if (!value.quoted && value.text == "false") {
    out = false;
    return true;
  }
  context.error(value.where,
                key_name(key, context) + " expects true or false, got " + value.describe());
  return false;
}

bool read_value(const ConfigValue& value, std::string& out, const KeyInfo& key,
                ParseContext& context) {
  if (!expect_scalar(value, key, context)) return false;
  if (!key.choices.empty()) {
    bool allowed = false;
    for (const auto& choice : key.choices)
      allowed = allowed || choice == value.text;
    if (!allowed) {
      context.error(value.where, key_name(key, context) + " must be one of " +
                                     join_names(key.choices) + ", got " + value.describe() +
                                     did_you_mean(value.text, key.choices));
      return false;
    }
  }
  if (!key.resource_type.empty() && context.references != nullptr) {
    context.references->push_back(
        {context.key_prefix + key.name, value.text, key.resource_type, value.where});
  }
  out = value.text;
  return true;
}

bool read_value(const ConfigValue& value, std::vector<std::string>& out, const KeyInfo& key,
                ParseContext& context) {
  if (!value.is_sequence()) {
    context.error(value.where,
                  key_name(key, context) + " expects a list of strings, got " + value.describe());
    return false;
  }
  std::vector<std::string> items;
  bool ok = true;
  for (const auto& item : value.items) {
    if (!item.is_scalar()) {
      context.error(
          item.where,
          key_name(key, context) + " expects a list of strings, but an item is " + item.describe());
      ok = false;
      continue;
    }
    items.push_back(item.text);
  }
  if (ok) out = std::move(items);
  return ok;
}

bool read_value(const ConfigValue& value, std::map<std::string, std::string>& out,
                const KeyInfo& key, ParseContext& context) {
  if (!value.is_mapping()) {
    context.error(value.where, key_name(key, context) + " expects a mapping of strings, got " +
                                   value.describe());
    return false;
  }
  std::map<std::string, std::string> entries;
  bool ok = true;
  for (size_t i = 0; i < value.keys.size(); ++i) {
    if (!value.items[i].is_scalar()) {
      context.error(value.items[i].where, key_name(key, context) + "." + value.keys[i].name +
                                              " expects a string, got " +
                                              value.items[i].describe());
      ok = false;
      continue;
    }
    entries[value.keys[i].name] = value.items[i].text;
  }
  if (ok) out = std::move(entries);
  return ok;
}

bool read_integer(const ConfigValue& value, int64_t& out, int64_t lowest, int64_t highest,
                  const KeyInfo& key, ParseContext& context) {
  if (!expect_scalar(value, key, context)) return false;
  const std::string& text = value.text;
  int64_t number = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (value.quoted || text.empty() || error == std::errc::invalid_argument ||
      end != text.data() + text.size()) {
    context.error(value.where,
                  key_name(key, context) + " expects an integer, got " + value.describe());
    return false;
  }
  if (error == std::errc::result_out_of_range || number < lowest || number > highest) {
    context.error(value.where, key_name(key, context) + " is out of range: " + text);
    return false;
  }
  if (!check_range(static_cast<double>(number), value, key, context)) return false;
  out = number;
  return true;
}

bool read_number(const ConfigValue& value, double& out, const KeyInfo& key, ParseContext& context) {
  if (!expect_scalar(value, key, context)) return false;
  const std::string& text = value.text;
  double number = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (value.quoted || text.empty() || error != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(number)) {
    context.error(value.where,
                  key_name(key, context) + " expects a number, got " + value.describe());
    return false;
  }
  if (!check_range(number, value, key, context)) return false;
  out = number;
  return true;
}

bool read_value(const ConfigValue& value, ConfigValue& out, const KeyInfo&, ParseContext&) {
  out = value;
  return true;
}

std::string default_text(const ConfigValue&) {
  return "none";
}

std::string default_text(bool value) {
  return value ? "true" : "false";
}

std::string default_text(const std::string& value) {
  return "\"" + value + "\"";
}

std::string default_text(const std::vector<std::string>& value) {
  std::string text = "[";
  for (const auto& item : value)
    text += (text.size() > 1 ? ", " : "") + item;
  return text + "]";
}

std::string default_text(const std::map<std::string, std::string>& value) {
  std::string text = "{";
  for (const auto& [name, item] : value)
    text += (text.size() > 1 ? ", " : "") + name + ": " + item;
  return text + "}";
}

std::string default_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace config_detail
DynamicSchemaBuilder::DynamicSchemaBuilder()
    : schema_(std::make_shared<ConfigSchema>()), defaults_(std::make_shared<DynamicConfig>()) {
  auto defaults = defaults_;
  schema_->make_default_ = [defaults] {
    return std::static_pointer_cast<void>(std::make_shared<DynamicConfig>(*defaults));
  };
}

void DynamicSchemaBuilder::key(const std::string& name, ValueType type,
                               const std::string& default_value, bool required,
                               const std::string& doc) {
  KeyInfo& key = schema_->keys_.emplace_back();
  key.name = name;
  key.type = type;
  key.doc = doc;
  key.required = required;
  if (!required) {
    key.default_text = default_value;
    if (type == ValueType::string_list) {
      std::vector<std::string>& items = defaults_->lists[name];
      std::string rest = default_value;
      while (!rest.empty()) {
        size_t comma = rest.find(',');
        items.push_back(rest.substr(0, comma));
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      }
    } else {
      defaults_->values[name] = default_value;
    }
  }
  key.assign = [type](void* config, const ConfigValue& value, const KeyInfo& info,
                      ParseContext& context) {
    auto& target = *static_cast<DynamicConfig*>(config);
    switch (type) {
      case ValueType::boolean: {
        bool parsed = false;
        if (config_detail::read_value(value, parsed, info, context))
          target.values[info.name] = parsed ? "true" : "false";
        break;
      }
      case ValueType::integer: {
        int64_t parsed = 0;
        if (config_detail::read_value(value, parsed, info, context))
          target.values[info.name] = std::to_string(parsed);
        break;
      }
      case ValueType::number: {
        double parsed = 0;
        if (config_detail::read_value(value, parsed, info, context))
          target.values[info.name] = value.text;
        break;
      }
      case ValueType::string_list: {
        std::vector<std::string> parsed;
        if (config_detail::read_value(value, parsed, info, context))
          target.lists[info.name] = std::move(parsed);
        break;
      }
      default: {
        std::string parsed;
        if (config_detail::read_value(value, parsed, info, context))
          target.values[info.name] = std::move(parsed);
        break;
      }
    }
  };
}

}  // namespace chatflow
