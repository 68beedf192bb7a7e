// A configuration error about one key, found only when the stage or resource is made (a backend
// this build lacks, a device that is not there): thrown from a type's create(), it is reported
// at the key's file:line:column rather than at the stage or resource.
#pragma once

#include <string>

#include "framework/api/registry.h"

namespace chatflow {

class ConfigKeyError : public ConfigError {
 public:
  // `key` as written in the config, nested keys joined by '.' (kv_cache.type).
  ConfigKeyError(std::string key, const std::string& message)
      : ConfigError(message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

}  // namespace chatflow
