#include "framework/api/config_value.h"

namespace chatflow {

const ConfigValue* ConfigValue::find(std::string_view key) const {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].name == key) return &items[i];
  }
  return nullptr;
}

std::string ConfigValue::describe() const {
  switch (kind) {
    case Kind::null:
      return "nothing (null)";
    case Kind::sequence:
      return "a list";
    case Kind::mapping:
      return "a mapping";
    case Kind::scalar:
      break;
  }
  return (quoted ? "the quoted string \"" : "\"") + text + "\"";
}

}  // namespace chatflow
