// Layers one and two of pipeline checking: the document's shape, and each stage's and
// resource's config against its schema. Layer three (the graph) is in pipeline_graph_check.cpp.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "framework/api/suggest.h"
#include "framework/loading/pipeline_graph_check.h"
#include "framework/loading/pipeline_spec.h"
#include "framework/loading/plugin_loader.h"
#include "framework/text/yaml_reader.h"

namespace chatflow {

const Connection* PipelineSpec::connection_from(size_t stage, PortId port) const {
  for (const auto& connection : connections) {
    if (connection.from_stage == stage && connection.from_port == port) return &connection;
  }
  return nullptr;
}

std::optional<size_t> PipelineSpec::stage_index(const std::string& stage_name) const {
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].name == stage_name) return i;
  }
  return std::nullopt;
}

namespace {

const std::vector<std::string> kTopLevelKeys = {
    "version", "name", "description", "plugins", "resources", "stages", "edges", "max_in_flight"};
const std::vector<std::string> kStageKeys = {"name", "type", "config", "concurrency",
                                             "description"};

// A value as text that changes exactly when the value does (keys in written order), so a
// reload can tell an unchanged resource from a changed one.
std::string canonical(const ConfigValue& value) {
  switch (value.kind) {
    case ConfigValue::Kind::null:
      return "~";
    case ConfigValue::Kind::scalar: {
      std::string text = value.quoted ? "'" : "";
      for (char c : value.text)
        text += c == '\'' ? std::string("''") : std::string(1, c);
      return text + (value.quoted ? "'" : "");
    }
    case ConfigValue::Kind::sequence: {
      std::string text = "[";
      for (const auto& item : value.items)
        text += canonical(item) + ",";
      return text + "]";
    }
    case ConfigValue::Kind::mapping: {
      std::string text = "{";
      for (size_t i = 0; i < value.keys.size(); ++i)
        text += value.keys[i].name + ":" + canonical(value.items[i]) + ",";
      return text + "}";
    }
  }
  return {};
}

bool is_stage_name(const std::string& name) {
  if (name.empty() || !std::isalpha(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

class SpecReader {
 public:
  SpecReader(const std::string& file, const Registry& registry, Diagnostics& diagnostics)
      : file_(file), registry_(registry), diagnostics_(diagnostics) {}
  SpecReader(const SpecReader&) = delete;

  std::optional<PipelineSpec> read(const ConfigValue& root) {
    spec_.file = file_;
    spec_.name = std::filesystem::path(file_).stem().string();
    if (!root.is_mapping()) {
      SourceLocation where = root.where.line > 0 ? root.where : SourceLocation{file_, 1, 1};
      diagnostics_.error(
          where,
          "a pipeline file must be a mapping with 'version' and 'stages', got " + root.describe());
      return std::nullopt;
    }
    for (const auto& key : root.keys) {
      if (std::find(kTopLevelKeys.begin(), kTopLevelKeys.end(), key.name) == kTopLevelKeys.end()) {
        diagnostics_.error(key.where, "unknown top-level key '" + key.name + "'" +
                                          did_you_mean(key.name, kTopLevelKeys) +
                                          " (known keys: " + join_names(kTopLevelKeys) + ")");
      }
    }
    read_version(root);
    read_scalars(root);
    read_plugins(root.find("plugins"));
    read_resources(root.find("resources"));
    const ConfigValue* stages = root.find("stages");
    if (stages == nullptr) {
      diagnostics_.error(root.where, "missing required key 'stages' (the list of stages)");
    } else {
      read_stages(*stages);
    }
    if (!diagnostics_.empty()) return std::nullopt;
    check_pipeline_graph(spec_, root.find("edges"), diagnostics_);
    if (!diagnostics_.empty()) return std::nullopt;
    return std::move(spec_);
  }

 private:
  void read_version(const ConfigValue& root) {
    const ConfigValue* version = root.find("version");
    if (version == nullptr) {
      diagnostics_.error(root.where, "missing required key 'version' (write 'version: 1')");
    } else if (!version->is_scalar() || version->text != "1") {
      diagnostics_.error(version->where, "unsupported pipeline version " + version->describe() +
                                             ": this chatflow reads version 1");
    }
  }

  void read_scalars(const ConfigValue& root) {
    if (const ConfigValue* name = root.find("name")) {
      if (!name->is_scalar() || !is_stage_name(name->text)) {
        diagnostics_.error(
            name->where,
            "'name' must be a name of letters, digits, '_' or '-', got " + name->describe());
      } else {
        spec_.name = name->text;
      }
    }
    if (const ConfigValue* description = root.find("description")) {
      if (!description->is_scalar()) {
        diagnostics_.error(description->where,
                           "'description' must be a string, got " + description->describe());
      }
    }
    if (const ConfigValue* limit = root.find("max_in_flight")) {
      size_t value = 0;
      const std::string& text = limit->text;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (!limit->is_scalar() || limit->quoted || error != std::errc() ||
          end != text.data() + text.size() || value == 0) {
        diagnostics_.error(limit->where,
                           "'max_in_flight' must be a positive integer, got " + limit->describe());
      } else {
        spec_.max_in_flight = value;
      }
    }
  }

  void read_plugins(const ConfigValue* plugins) {
    // Every library in $CHATFLOW_PLUGIN_PATH, then those the file lists.
    for (const auto& path : plugins_on_search_path()) {
      try {
        add_plugin(PluginLibrary::open(path));
      } catch (const std::exception& error) {
        std::fprintf(stderr, "chatflow: warning: skipping a plugin on CHATFLOW_PLUGIN_PATH: %s\n",
                     error.what());
      }
    }
    if (plugins == nullptr || plugins->is_null()) return;
    if (!plugins->is_sequence()) {
      diagnostics_.error(plugins->where, "'plugins' must be a list of shared-library paths, got " +
                                             plugins->describe());
      return;
    }
    for (const auto& plugin : plugins->items) {
      if (!plugin.is_scalar() || plugin.text.empty()) {
        diagnostics_.error(plugin.where, "a plugin entry must be a path, got " + plugin.describe());
        continue;
      }
      spec_.plugins.push_back(plugin.text);
      try {
        add_plugin(PluginLibrary::open(find_plugin(plugin.text, file_)));
      } catch (const std::exception& error) {
        diagnostics_.error(plugin.where, error.what());
      }
    }
  }

  void add_plugin(const std::shared_ptr<PluginLibrary>& library) {
    if (!extended_) {
      extended_ = registry_;
      registry_ = *extended_;
    }
    for (auto& type : library->stage_types()) {
      std::string name = type.name;
      if (extended_->find_stage(name)) {
        throw PluginError(library->path() + ": refused: it provides stage type '" + name +
                          "', which is already defined");
      }
      extended_->add(std::move(type));
    }
    for (auto& type : library->tool_types()) {
      std::string name = type.name;
      if (extended_->find_resource(name)) {
        throw PluginError(library->path() + ": refused: it provides tool type '" + name +
                          "', which is already a resource type");
      }
      extended_->add(std::move(type));
    }
    spec_.plugin_libraries.push_back(library);
  }

  void read_resources(const ConfigValue* resources) {
    if (resources == nullptr || resources->is_null()) return;
    if (!resources->is_mapping()) {
      diagnostics_.error(resources->where,
                         "'resources' must be a mapping of name to {type: ..., ...}, got " +
                             resources->describe());
      return;
    }
    for (size_t i = 0; i < resources->keys.size(); ++i) {
      read_resource(resources->keys[i], resources->items[i]);
    }
  }

  // The value of every key of `mapping` and of the mappings within it, by its dotted path.
  static void record_key_locations(const ConfigValue& mapping, const std::string& prefix,
                                   std::map<std::string, SourceLocation>& locations) {
    if (!mapping.is_mapping()) return;
    for (size_t i = 0; i < mapping.keys.size(); ++i) {
      std::string path = prefix + mapping.keys[i].name;
      locations[path] = mapping.items[i].where;
      record_key_locations(mapping.items[i], path + ".", locations);
    }
  }

  void read_resource(const ConfigValue::Key& key, const ConfigValue& value) {
    ResourceSpec resource;
    resource.name = key.name;
    resource.where = key.where;
    if (!is_stage_name(key.name)) {
      diagnostics_.error(key.where,
                         "resource name '" + key.name +
                             "' must start with a letter and use letters, digits, '_' or '-'");
    }
    if (!value.is_mapping()) {
      diagnostics_.error(
          value.where,
          "resource '" + key.name + "' must be a mapping with a 'type', got " + value.describe());
      return;
    }
    const ConfigValue* type = value.find("type");
    if (type == nullptr || !type->is_scalar()) {
      diagnostics_.error(type ? type->where : value.where,
                         "resource '" + key.name + "' needs a 'type' (one of: " +
                             join_names(registry_.get().resource_names()) + ")");
      return;
    }
    resource.type = registry_.get().find_resource(type->text);
    if (!resource.type) {
      diagnostics_.error(
          type->where, "resource '" + key.name + "': unknown resource type '" + type->text + "'" +
                           did_you_mean(type->text, registry_.get().resource_names()) +
                           " (known types: " + join_names(registry_.get().resource_names()) + ")");
      return;
    }
    // The resource's own keys sit beside 'type'.
    ConfigValue config = value;
    for (size_t i = 0; i < config.keys.size(); ++i) {
      if (config.keys[i].name == "type") {
        config.keys.erase(config.keys.begin() + static_cast<std::ptrdiff_t>(i));
        config.items.erase(config.items.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    ParseContext context{diagnostics_,
                         "resource '" + key.name + "' (" + resource.type->name + ")",
                         &resource.references,
                         {}};
    resource.config = resource.type->schema->parse(&config, key.where, context);
    resource.fingerprint = type->text + ' ' + canonical(config);
    record_key_locations(config, "", resource.key_locations);
    spec_.resources.push_back(std::move(resource));
  }

  void read_stages(const ConfigValue& stages) {
    if (!stages.is_sequence()) {
      diagnostics_.error(stages.where, "'stages' must be a list of {name, type, config}, got " +
                                           stages.describe());
      return;
    }
    if (stages.items.empty()) {
      diagnostics_.error(stages.where, "'stages' is empty: a pipeline needs at least one stage");
      return;
    }
    std::set<std::string> names;
    for (const auto& entry : stages.items) {
      if (auto stage = read_stage(entry)) {
        if (!names.insert(stage->name).second) {
          diagnostics_.error(stage->where, "stage name '" + stage->name + "' is used twice");
        }
        spec_.stages.push_back(std::move(*stage));
      }
    }
  }

  std::optional<StageSpec> read_stage(const ConfigValue& entry) {
    if (!entry.is_mapping()) {
      diagnostics_.error(entry.where,
                         "a stage must be a mapping {name, type, config}, got " + entry.describe());
      return std::nullopt;
    }
    for (const auto& key : entry.keys) {
      if (std::find(kStageKeys.begin(), kStageKeys.end(), key.name) == kStageKeys.end()) {
        diagnostics_.error(key.where, "unknown stage key '" + key.name + "'" +
                                          did_you_mean(key.name, kStageKeys) +
                                          " (a stage has: " + join_names(kStageKeys) +
                                          "; the stage type's own keys go under 'config')");
      }
    }
    StageSpec stage;
    stage.where = entry.where;
    const ConfigValue* name = entry.find("name");
    const ConfigValue* type = entry.find("type");
    if (name == nullptr || !name->is_scalar() || !is_stage_name(name->text)) {
      diagnostics_.error(
          name ? name->where : entry.where,
          "a stage needs a 'name' that starts with a letter and uses letters, digits, "
          "'_' or '-'" +
              (name ? ", got " + name->describe() : std::string()));
      return std::nullopt;
    }
    stage.name = name->text;
    if (stage.name == "sink") {
      diagnostics_.error(name->where,
                         "'sink' is reserved for the request's sink; rename the stage");
    }
    if (type == nullptr || !type->is_scalar()) {
      diagnostics_.error(type ? type->where : entry.where,
                         "stage '" + stage.name + "' needs a 'type' (see `chatflow stages`)");
      return std::nullopt;
    }
    stage.type = registry_.get().find_stage(type->text);
    if (!stage.type) {
      diagnostics_.error(type->where,
                         "stage '" + stage.name + "': unknown stage type '" + type->text + "'" +
                             did_you_mean(type->text, registry_.get().stage_names()) +
                             " (known types: " + join_names(registry_.get().stage_names()) + ")");
      return std::nullopt;
    }
    stage.concurrency = stage.type->default_concurrency;
    if (const ConfigValue* concurrency = entry.find("concurrency"))
      read_concurrency(*concurrency, stage);
    ParseContext context{diagnostics_,
                         "stage '" + stage.name + "' (" + stage.type->name + ")",
                         &stage.references,
                         {}};
    size_t errors_before = diagnostics_.size();
    stage.config = stage.type->schema->parse(entry.find("config"), entry.where, context);
    if (stage.type->ports_for_config && diagnostics_.size() == errors_before) {
      // This stage's own copy of its type, with the ports its configuration names.
      auto own = std::make_shared<StageTypeInfo>(*stage.type);
      try {
        own->ports = own->ports_for_config(stage.config.get());
        own->default_port = -1;
        stage.type = own;
      } catch (const ConfigError& error) {
        const ConfigValue* config = entry.find("config");
        diagnostics_.error(
            config ? config->where : entry.where,
            "stage '" + stage.name + "' (" + stage.type->name + "): " + error.what());
      }
    }
    return stage;
  }

  void read_concurrency(const ConfigValue& value, StageSpec& stage) {
    if (value.is_scalar() && value.text == "serial") {
      stage.concurrency = 1;
      return;
    }
    if (value.is_scalar() && value.text == "unlimited") {
      stage.concurrency = kUnlimitedConcurrency;
      return;
    }
    size_t limit = 0;
    const std::string& text = value.text;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), limit);
    if (!value.is_scalar() || value.quoted || error != std::errc() ||
        end != text.data() + text.size() || limit == 0) {
      diagnostics_.error(value.where,
                         "stage '" + stage.name +
                             "': 'concurrency' must be serial, unlimited or a positive "
                             "integer, got " +
                             value.describe());
      return;
    }
    stage.concurrency = limit;
  }

  const std::string& file_;
  std::reference_wrapper<const Registry> registry_;
  std::optional<Registry> extended_;  // the registry plus plugin types, once a plugin loads
  Diagnostics& diagnostics_;
  PipelineSpec spec_;
};

}  // namespace

namespace {

// `reader_errors` came from reading the YAML; with a syntax error there is no document to check,
// while environment errors leave one whose other problems are still worth reporting.
std::optional<PipelineSpec> check_document(const ConfigValue& root,
                                           const Diagnostics& reader_errors,
                                           const std::string& file, const Registry& registry,
                                           Diagnostics& diagnostics) {
  diagnostics.append(reader_errors);
  if (!reader_errors.empty() && root.is_null()) return std::nullopt;
  Diagnostics checks;
  auto spec = SpecReader(file, registry, checks).read(root);
  diagnostics.append(checks);
  if (!reader_errors.empty() || !checks.empty()) return std::nullopt;
  return spec;
}

}  // namespace

std::optional<PipelineSpec> parse_pipeline_yaml(const std::string& yaml, const std::string& file,
                                                const Registry& registry,
                                                Diagnostics& diagnostics) {
  Diagnostics reader_errors;
  ConfigValue root = read_yaml_text(yaml, file, reader_errors);
  return check_document(root, reader_errors, file, registry, diagnostics);
}

std::optional<PipelineSpec> load_pipeline_spec(const std::string& path, const Registry& registry,
                                               Diagnostics& diagnostics) {
  Diagnostics reader_errors;
  ConfigValue root = read_yaml_file(path, reader_errors);
  return check_document(root, reader_errors, path, registry, diagnostics);
}

}  // namespace chatflow
