#include "framework/text/yaml_reader.h"
#include "framework/text/variable_overrides.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>
#include <vector>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

namespace chatflow {

namespace {

SourceLocation location_of(const YAML::Mark& mark, const std::string& file) {
  if (mark.is_null()) return {file, 0, 0};
  return {file, mark.line + 1, mark.column + 1};
}

bool is_variable_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Stops the tree at the first node past a limit: aliases make a few bytes stand for any number
// of nodes (and one may even contain itself), so the limits count what is built, not what is
// written.
struct TooLarge {
  YAML::Mark mark;
  std::string message;
};

class TreeBuilder {
 public:
  TreeBuilder(const std::string& file, Diagnostics& diagnostics)
      : file_(file), diagnostics_(diagnostics) {}

  ConfigValue build(const YAML::Node& node) {
    if (++nodes_ > kMaxYamlNodes) {
      throw TooLarge{node.Mark(), "the document expands to more than " +
                                      std::to_string(kMaxYamlNodes) +
                                      " values (aliases repeat what they name)"};
    }
    ConfigValue value;
    value.where = location_of(node.Mark(), file_);
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        value.kind = ConfigValue::Kind::null;
        break;
      case YAML::NodeType::Scalar:
        value.kind = ConfigValue::Kind::scalar;
        value.text = node.Scalar();
        // yaml-cpp tags plain scalars "?" and quoted ones "!".
        value.quoted = node.Tag() == "!";
        // In flow style "${VAR}" must be quoted to be valid YAML; its type then comes from the
        // interpolated text, as if it had been written plain.
        if (value.text.find("${") != std::string::npos) value.quoted = false;
        value.interpolation_failed =
            !interpolate_environment(value.text, value.where, diagnostics_);
        break;
      case YAML::NodeType::Sequence:
        value.kind = ConfigValue::Kind::sequence;
        enter(node);
        for (const auto& item : node)
          value.items.push_back(build(item));
        leave();
        break;
      case YAML::NodeType::Map:
        value.kind = ConfigValue::Kind::mapping;
        enter(node);
        build_mapping(node, value);
        leave();
        break;
    }
    return value;
  }

 private:
  // A list or mapping that is among its own ancestors came through an alias to itself. Distinct
  // collections start at distinct places in the text, so the start marks identify them.
  void enter(const YAML::Node& node) {
    const YAML::Mark mark = node.Mark();
    if (!mark.is_null() && std::find(open_collections_.begin(), open_collections_.end(),
                                     mark.pos) != open_collections_.end()) {
      throw TooLarge{mark, "an alias refers to a list or mapping that contains it (a cycle)"};
    }
    if (open_collections_.size() >= kMaxYamlDepth) {
      throw TooLarge{
          mark, "lists and mappings nest deeper than " + std::to_string(kMaxYamlDepth) + " levels"};
    }
    open_collections_.push_back(mark.is_null() ? -1 : mark.pos);
  }
  void leave() { open_collections_.pop_back(); }

  void build_mapping(const YAML::Node& node, ConfigValue& value) {
    std::unordered_set<std::string> seen;
    for (const auto& entry : node) {
      const YAML::Node& key = entry.first;
      SourceLocation key_where = location_of(key.Mark(), file_);
      if (!key.IsScalar()) {
        diagnostics_.error(key_where, "a mapping key must be a plain name, not a list or mapping");
        continue;
      }
      if (!seen.insert(key.Scalar()).second) {
        diagnostics_.error(key_where, "duplicate key '" + key.Scalar() + "' in this mapping");
        continue;
      }
      value.keys.push_back({key.Scalar(), key_where});
      value.items.push_back(build(entry.second));
    }
  }

  const std::string& file_;
  Diagnostics& diagnostics_;
  size_t nodes_ = 0;
  std::vector<int> open_collections_;  // start positions of the lists and mappings being built
};

}  // namespace

bool interpolate_environment(std::string& text, const SourceLocation& where,
                             Diagnostics& diagnostics) {
  if (text.find('$') == std::string::npos) return true;
  std::string result;
  result.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$') {
      result += text[i];
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '$') {
      result += '$';
      ++i;
      continue;
    }
    if (i + 1 >= text.size() || text[i + 1] != '{') {
      result += '$';
      continue;
    }
    size_t close = text.find('}', i + 2);
    if (close == std::string::npos) {
      diagnostics.error(where, "unterminated environment reference '" + text.substr(i) +
                                   "': expected '}' (write '$$' for a literal '$')");
      return false;
    }
    std::string_view reference(text.data() + i + 2, close - i - 2);
    std::string_view name = reference;
    std::string_view fallback;
    bool has_fallback = false;
    if (size_t separator = reference.find(":-"); separator != std::string_view::npos) {
      name = reference.substr(0, separator);
      fallback = reference.substr(separator + 2);
      has_fallback = true;
    }
    if (!is_variable_name(name)) {
      diagnostics.error(where, "malformed environment reference '${" + std::string(reference) +
                                   "}': expected ${NAME} or ${NAME:-default}");
      return false;
    }
    const std::string* overridden = overridden_variable(std::string(name));
    const char* env_value =
        overridden ? overridden->c_str() : std::getenv(std::string(name).c_str());
    if (env_value != nullptr && (*env_value != '\0' || !has_fallback)) {
      result += env_value;
    } else if (has_fallback) {
      result += fallback;
    } else {
      diagnostics.error(where, "environment variable '" + std::string(name) +
                                   "' is not set (give a default with ${" + std::string(name) +
                                   ":-value})");
      return false;
    }
    i = close;
  }
  text = std::move(result);
  return true;
}

ConfigValue read_yaml_text(const std::string& text, const std::string& file_name,
                           Diagnostics& diagnostics) {
  if (text.size() > kMaxYamlBytes) {
    diagnostics.error({file_name, 0, 0}, "the file is " + std::to_string(text.size()) +
                                             " bytes; YAML files may be at most " +
                                             std::to_string(kMaxYamlBytes));
    return {};
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& error) {
    diagnostics.error(location_of(error.mark, file_name),
                      "invalid YAML: lists and mappings nest deeper than the parser's limit of " +
                          std::to_string(error.depth()) + " levels");
    return {};
  } catch (const YAML::Exception& error) {
    // yaml-cpp's message already says what it expected ("end of map not found", ...).
    diagnostics.error(location_of(error.mark, file_name), "invalid YAML: " + error.msg);
    return {};
  }
  try {
    return TreeBuilder(file_name, diagnostics).build(root);
  } catch (const TooLarge& refusal) {
    diagnostics.error(location_of(refusal.mark, file_name), "invalid YAML: " + refusal.message);
    return {};
  }
}

ConfigValue read_yaml_file(const std::string& path, Diagnostics& diagnostics) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    diagnostics.error({path, 0, 0}, "is a directory, not a YAML file");
    return {};
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    diagnostics.error({path, 0, 0}, std::string("cannot open file: ") + std::strerror(errno));
    return {};
  }
  // Read no more than one byte past the limit: a huge file is refused without loading it.
  if (auto size = std::filesystem::file_size(path, error); !error && size > kMaxYamlBytes) {
    diagnostics.error({path, 0, 0}, "the file is " + std::to_string(size) +
                                        " bytes; YAML files may be at most " +
                                        std::to_string(kMaxYamlBytes));
    return {};
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  return read_yaml_text(contents.str(), path, diagnostics);
}

}  // namespace chatflow
