// A config schema ties each YAML key of a stage or resource to a field of its config struct, with
// the field's type, default, constraints and one-line doc. The same schema validates YAML (every
// error with its location), fills the struct, and documents the type in `chatflow stages`.
//
//   struct TrimConfig { std::string store; int budget_tokens = 4000; };
//   SchemaBuilder<TrimConfig> schema;
//   schema.key("store", &TrimConfig::store, "history store").required().resource("history_store");
//   schema.key("budget_tokens", &TrimConfig::budget_tokens, "tokens kept").range(1, 1'000'000);
//
// Defaults are the struct's own member initialisers, so code and docs cannot disagree.
#pragma once

#include <charconv>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/api/config_value.h"

namespace chatflow {

enum class ValueType {
  boolean,
  integer,
  number,
  string,
  string_list,
  string_map,
  object,
  object_list,
  any
};

// "an integer", "a list of strings", ...
std::string describe(ValueType type);

// A key whose value names a resource declared under `resources:`; checked when the graph is
// validated, since the schema alone does not know which resources exist.
struct ResourceReference {
  std::string key;            // "model", or "retrieval.index" for nested keys
  std::string resource_name;  // the value written in YAML
  std::string resource_type;  // the type the key requires
  SourceLocation where;
};

// Where parsing reports to: errors go to `diagnostics`, prefixed with `owner`
// (e.g. "stage 'exact' (exact_cache)"); resource references are collected for later checks.
struct ParseContext {
  Diagnostics& diagnostics;
  std::string owner;
  std::vector<ResourceReference>* references = nullptr;
  std::string key_prefix;  // "kv_cache." inside a nested object

  void error(const SourceLocation& where, const std::string& message) const;
};

class ConfigSchema;

struct KeyInfo {
  std::string name;
  ValueType type = ValueType::string;
  std::string doc;
  bool required = false;
  std::string default_text;  // the default as YAML would write it; empty when required
  std::vector<std::string> choices;
  std::optional<double> minimum;
  std::optional<double> maximum;
  std::string resource_type;
  std::shared_ptr<const ConfigSchema> nested;
  // Reads `value` into the field of `config` (a pointer to the config struct).
  std::function<void(void* config, const ConfigValue& value, const KeyInfo& key,
                     ParseContext& context)>
      assign;
};

// The type-erased schema stored in the registries.
class ConfigSchema {
 public:
  const std::vector<KeyInfo>& keys() const { return keys_; }
  const KeyInfo* find(const std::string& name) const;

  // Builds a config object from `mapping` (null or absent means "all defaults"). Errors are
  // reported through `context`; `owner_where` locates "missing required key" errors when the
  // mapping itself is absent. Returns the object even with errors, so checking continues.
  std::shared_ptr<void> parse(const ConfigValue* mapping, const SourceLocation& owner_where,
                              ParseContext& context) const;

  // A config object holding only defaults (for documentation).
  std::shared_ptr<void> make_default() const { return make_default_(); }

 private:
  template <class Config>
  friend class SchemaBuilder;
  friend class DynamicSchemaBuilder;

  std::vector<KeyInfo> keys_;
  std::function<std::shared_ptr<void>()> make_default_;
};

namespace config_detail {

// Reading one scalar or collection into a C++ value; each reports a typed error and leaves the
// field at its default when the value does not fit.
bool read_value(const ConfigValue& value, bool& out, const KeyInfo& key, ParseContext& context);
bool read_value(const ConfigValue& value, std::string& out, const KeyInfo& key,
                ParseContext& context);
bool read_value(const ConfigValue& value, std::vector<std::string>& out, const KeyInfo& key,
                ParseContext& context);
bool read_value(const ConfigValue& value, std::map<std::string, std::string>& out,
                const KeyInfo& key, ParseContext& context);
bool read_integer(const ConfigValue& value, int64_t& out, int64_t lowest, int64_t highest,
                  const KeyInfo& key, ParseContext& context);
bool read_number(const ConfigValue& value, double& out, const KeyInfo& key, ParseContext& context);
// Any YAML value, kept as its tree (a JSON Schema written in YAML, say).
bool read_value(const ConfigValue& value, ConfigValue& out, const KeyInfo& key,
                ParseContext& context);

template <class Integer>
requires(std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>) bool read_value(
    const ConfigValue& value, Integer& out, const KeyInfo& key, ParseContext& context) {
  int64_t wide = 0;
  int64_t highest = std::numeric_limits<Integer>::max() > std::numeric_limits<int64_t>::max()
                        ? std::numeric_limits<int64_t>::max()
                        : static_cast<int64_t>(std::numeric_limits<Integer>::max());
  if (!read_integer(value, wide, static_cast<int64_t>(std::numeric_limits<Integer>::lowest()),
                    highest, key, context)) {
    return false;
  }
  out = static_cast<Integer>(wide);
  return true;
}

template <class Floating>
requires std::is_floating_point_v<Floating>
bool read_value(const ConfigValue& value, Floating& out, const KeyInfo& key,
                ParseContext& context) {
  double wide = 0;
  if (!read_number(value, wide, key, context)) return false;
  out = static_cast<Floating>(wide);
  return true;
}

template <class Field>
constexpr ValueType value_type_of() {
  if constexpr (std::is_same_v<Field, bool>) {
    return ValueType::boolean;
  } else if constexpr (std::is_integral_v<Field>) {
    return ValueType::integer;
  } else if constexpr (std::is_floating_point_v<Field>) {
    return ValueType::number;
  } else if constexpr (std::is_same_v<Field, std::string>) {
    return ValueType::string;
  } else if constexpr (std::is_same_v<Field, std::vector<std::string>>) {
    return ValueType::string_list;
  } else if constexpr (std::is_same_v<Field, ConfigValue>) {
    return ValueType::any;
  } else {
    static_assert(std::is_same_v<Field, std::map<std::string, std::string>>,
                  "unsupported config field type");
    return ValueType::string_map;
  }
}

std::string default_text(bool value);
std::string default_text(const std::string& value);
std::string default_text(const std::vector<std::string>& value);
std::string default_text(const std::map<std::string, std::string>& value);
std::string default_text(double value);
std::string default_text(const ConfigValue& value);
template <class Integer>
requires(std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>) std::string
    default_text(Integer value) {
  return std::to_string(value);
}

}  // namespace config_detail

// Options of the key just declared, chained: `.required().range(1, 64)`.
class KeyOptions {
 public:
  explicit KeyOptions(KeyInfo& key) : key_(key) {}
  KeyOptions& required() {
    key_.required = true;
    key_.default_text.clear();
    return *this;
  }
  KeyOptions& choices(std::vector<std::string> allowed) {
    key_.choices = std::move(allowed);
    return *this;
  }
  KeyOptions& range(double minimum, double maximum) {
    key_.minimum = minimum;
    key_.maximum = maximum;
    return *this;
  }
  KeyOptions& at_least(double minimum) {
    key_.minimum = minimum;
    return *this;
  }
  // The value names a resource of `type` declared under `resources:`.
  KeyOptions& resource(std::string type) {
    key_.resource_type = std::move(type);
    return *this;
  }

 private:
  KeyInfo& key_;
};

template <class Config>
class SchemaBuilder {
 public:
  SchemaBuilder() : schema_(std::make_shared<ConfigSchema>()) {
    schema_->make_default_ = [] {
      return std::static_pointer_cast<void>(std::make_shared<Config>());
    };
  }

  template <class Field>
  KeyOptions key(std::string name, Field Config::*member, std::string doc) {
    KeyInfo& key = add(std::move(name), config_detail::value_type_of<Field>(), std::move(doc));
    key.default_text = config_detail::default_text(Config{}.*member);
    key.assign = [member](void* config, const ConfigValue& value, const KeyInfo& info,
                          ParseContext& context) {
      config_detail::read_value(value, static_cast<Config*>(config)->*member, info, context);
    };
    return KeyOptions(key);
  }

  // A nested mapping with a schema of its own (e.g. `kv_cache: {block_tokens: 16}`).
  template <class Nested>
  KeyOptions object(std::string name, Nested Config::*member, const SchemaBuilder<Nested>& nested,
                    std::string doc) {
    KeyInfo& key = add(std::move(name), ValueType::object, std::move(doc));
    key.nested = nested.schema();
    key.assign = [member](void* config, const ConfigValue& value, const KeyInfo& info,
                          ParseContext& context) {
      ParseContext inner = context;
      inner.key_prefix = context.key_prefix + info.name + ".";
      auto parsed = info.nested->parse(&value, value.where, inner);
      static_cast<Config*>(config)->*member = *std::static_pointer_cast<Nested>(parsed);
    };
    return KeyOptions(key);
  }

  // A list of mappings, each with the nested schema (e.g. `tools: [{name: a}, {name: b}]`);
  // errors name the item as `tools[1].name`.
  template <class Nested>
  KeyOptions list(std::string name, std::vector<Nested> Config::*member,
                  const SchemaBuilder<Nested>& nested, std::string doc) {
    KeyInfo& key = add(std::move(name), ValueType::object_list, std::move(doc));
    key.default_text = "[]";
    key.nested = nested.schema();
    key.assign = [member](void* config, const ConfigValue& value, const KeyInfo& info,
                          ParseContext& context) {
      if (!value.is_sequence()) {
        context.error(value.where, "key '" + context.key_prefix + info.name +
                                       "' expects a list of mappings, got " + value.describe());
        return;
      }
      std::vector<Nested> items;
      for (size_t i = 0; i < value.items.size(); ++i) {
        ParseContext inner = context;
        inner.key_prefix = context.key_prefix + info.name + "[" + std::to_string(i) + "].";
        auto parsed = info.nested->parse(&value.items[i], value.items[i].where, inner);
        items.push_back(*std::static_pointer_cast<Nested>(parsed));
      }
      static_cast<Config*>(config)->*member = std::move(items);
    };
    return KeyOptions(key);
  }

  std::shared_ptr<const ConfigSchema> schema() const { return schema_; }

 private:
  KeyInfo& add(std::string name, ValueType type, std::string doc) {
    auto& key = schema_->keys_.emplace_back();
    key.name = std::move(name);
    key.type = type;
    key.doc = std::move(doc);
    return key;
  }

  std::shared_ptr<ConfigSchema> schema_;
};

// For stage and resource types without configuration.
struct NoConfig {};

// The configuration of a type whose keys are only known at run time (a plugin's): every value
// checked against its declared type, then kept as text (lists as lists).
struct DynamicConfig {
  std::map<std::string, std::string> values;
  std::map<std::string, std::vector<std::string>> lists;
};

class DynamicSchemaBuilder {
 public:
  DynamicSchemaBuilder();
  // `type` is boolean, integer, number, string or string_list; `default_value` as YAML writes
  // it (a list: comma-separated), ignored when `required`.
  void key(const std::string& name, ValueType type, const std::string& default_value, bool required,
           const std::string& doc);
  std::shared_ptr<const ConfigSchema> schema() const { return schema_; }

 private:
  std::shared_ptr<ConfigSchema> schema_;
  std::shared_ptr<DynamicConfig> defaults_;
};

}  // namespace chatflow
