// YAML files as ConfigValue trees that remember where every value came from: the one place
// yaml-cpp is read, for pipelines, serve files and keys files alike.
#pragma once

#include <cstddef>
#include <string>

#include "framework/api/config_value.h"
#include "framework/api/diagnostics.h"

namespace chatflow {

// What a YAML file may be: its size, how many values it expands to (through aliases too) and how
// deep its lists and mappings nest. Past any of them the file is refused with an error, never
// read into memory without bound.
inline constexpr size_t kMaxYamlBytes = 8u << 20;
inline constexpr size_t kMaxYamlNodes = 500'000;
inline constexpr size_t kMaxYamlDepth = 256;

// Reads a YAML file into a ConfigValue tree, interpolating ${VAR} and ${VAR:-default} in scalars.
// Every problem (syntax, duplicate keys, unset variables) is added to `diagnostics` with its
// location; the returned tree is only meaningful when no error was added.
ConfigValue read_yaml_file(const std::string& path, Diagnostics& diagnostics);

// Same, for YAML text already in memory; `file_name` is used in locations.
ConfigValue read_yaml_text(const std::string& text, const std::string& file_name,
                           Diagnostics& diagnostics);

// Replaces ${VAR} and ${VAR:-default} in `text` with environment values; "$$" is a literal "$".
// Reports a missing variable or malformed reference at `where` and returns false.
bool interpolate_environment(std::string& text, const SourceLocation& where,
                             Diagnostics& diagnostics);

}  // namespace chatflow
