// A configuration document as a plain tree that remembers where every value came from.
// Stage and resource code reads this, never yaml-cpp directly: it keeps the YAML library out of
// every stage's headers, and the same tree can be built from a plugin's C-side description.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "framework/api/diagnostics.h"

namespace chatflow {

class ConfigValue {
 public:
  enum class Kind { null, scalar, sequence, mapping };

  struct Key {
    std::string name;
    SourceLocation where;
  };

  Kind kind = Kind::null;
  SourceLocation where;
  std::string text;     // scalar text, after ${VAR} interpolation
  bool quoted = false;  // a quoted scalar is always a string, never a number or boolean
  bool interpolation_failed = false;  // already reported; later checks skip it
  std::vector<ConfigValue> items;     // sequence elements, or mapping values
  std::vector<Key> keys;              // mapping keys, same index as `items`

  bool is_null() const { return kind == Kind::null; }
  bool is_scalar() const { return kind == Kind::scalar; }
  bool is_sequence() const { return kind == Kind::sequence; }
  bool is_mapping() const { return kind == Kind::mapping; }

  // The value under `key` of a mapping, or nullptr.
  const ConfigValue* find(std::string_view key) const;

  // "a mapping", "a list", "the string \"x\"", ...: used in "expected X, got Y" messages.
  std::string describe() const;
};
}  // namespace chatflow
