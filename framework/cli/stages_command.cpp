// chatflow stages [TYPE]: what types exist, and for one type its ports and config keys, in the
// spirit of gst-inspect.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "framework/api/registry.h"
#include "framework/api/suggest.h"
#include "framework/cli/command.h"
#include "framework/loading/plugin_loader.h"

namespace chatflow::cli {
namespace {

struct StagesOptions {
  std::string type;    // empty: list every type
  std::string plugin;  // inspect this plugin library instead
};

std::string constraints(const KeyInfo& key) {
  std::string text;
  if (!key.choices.empty()) text += "one of: " + join_names(key.choices);
  if (key.minimum || key.maximum) {
    if (!text.empty()) text += "; ";
    std::ostringstream bounds;
    bounds << "range: " << (key.minimum ? std::to_string(static_cast<long long>(*key.minimum)) : "")
           << ".." << (key.maximum ? std::to_string(static_cast<long long>(*key.maximum)) : "");
    text += bounds.str();
  }
  if (!key.resource_type.empty()) {
    if (!text.empty()) text += "; ";
    text += "names a " + key.resource_type + " resource";
  }
  return text;
}

void print_keys(const ConfigSchema& schema, const std::string& prefix) {
  for (const auto& key : schema.keys()) {
    std::cout << "    " << std::left << std::setw(24) << prefix + key.name << std::setw(22)
              << describe(key.type) << (key.required ? "required" : "default " + key.default_text)
              << "\n"
              << "        " << key.doc << "\n";
    if (auto text = constraints(key); !text.empty()) std::cout << "        " << text << "\n";
    // A list's items are shown as `tools[].name`, as its errors name them `tools[1].name`.
    if (key.nested)
      print_keys(*key.nested,
                 prefix + key.name + (key.type == ValueType::object_list ? "[]." : "."));
  }
}

void describe_stage(const StageTypeInfo& type) {
  std::cout << "Stage type " << type.name << " (" << to_string(type.kind) << " stage, "
            << type.origin << ")\n"
            << "  " << type.doc << "\n\n  Ports:\n";
  for (size_t i = 0; i < type.ports.size(); ++i) {
    const auto& port = type.ports[i];
    std::cout << "    " << std::left << std::setw(12) << port.name << std::setw(8)
              << to_string(port.kind) << port.doc
              << (static_cast<int>(i) == type.default_port ? "  [default]" : "") << "\n";
  }
  std::cout << "\n  Concurrency: "
            << (type.default_concurrency == 0   ? std::string("unlimited")
                : type.default_concurrency == 1 ? std::string("serial")
                                                : std::to_string(type.default_concurrency))
            << " (override with 'concurrency:' on the stage)\n\n  Config keys:\n";
  if (type.schema->keys().empty()) std::cout << "    (none)\n";
  print_keys(*type.schema, "");
}

void describe_resource(const ResourceTypeInfo& type) {
  std::cout << "Resource type " << type.name << " (" << type.origin << ")\n  " << type.doc
            << "\n\n  Config keys (beside 'type'):\n";
  if (type.schema->keys().empty()) std::cout << "    (none)\n";
  print_keys(*type.schema, "");
}

int stages_command(const StagesOptions& options) {
  if (!options.plugin.empty()) {
    // A plugin inspected on its own: its descriptor, or why this chatflow refuses it (thrown).
    std::cout << PluginLibrary::open(options.plugin)->describe();
    return 0;
  }
  // Built-in types, and those of the plugins on CHATFLOW_PLUGIN_PATH.
  Registry registry = builtin_registry();
  for (const auto& path : plugins_on_search_path()) {
    try {
      auto library = PluginLibrary::open(path);
      for (auto& type : library->stage_types()) {
        if (!registry.find_stage(type.name)) registry.add(std::move(type));
      }
      for (auto& type : library->tool_types()) {
        if (!registry.find_resource(type.name)) registry.add(std::move(type));
      }
    } catch (const std::exception& error) {
      std::cerr << "chatflow: warning: skipping a plugin on CHATFLOW_PLUGIN_PATH: " << error.what()
                << "\n";
    }
  }
  if (options.type.empty()) {
    std::cout << "Stage types:\n";
    for (const auto& name : registry.stage_names()) {
      auto type = registry.find_stage(name);
      std::cout << "  " << std::left << std::setw(20) << name << std::setw(9)
                << to_string(type->kind) << std::setw(20) << join_names(type->port_names())
                << type->doc << "\n";
    }
    std::cout << "\nResource types:\n";
    for (const auto& name : registry.resource_names()) {
      std::cout << "  " << std::left << std::setw(20) << name << registry.find_resource(name)->doc
                << "\n";
    }
    if (registry.resource_names().empty()) std::cout << "  (none in this build)\n";
    std::cout << "\n`chatflow stages TYPE` shows a type's ports and config keys.\n";
    return 0;
  }
  if (auto stage = registry.find_stage(options.type)) {
    describe_stage(*stage);
    return 0;
  }
  if (auto resource = registry.find_resource(options.type)) {
    describe_resource(*resource);
    return 0;
  }
  std::vector<std::string> names = registry.stage_names();
  for (const auto& name : registry.resource_names())
    names.push_back(name);
  std::cerr << "chatflow: no stage or resource type '" << options.type << "'"
            << did_you_mean(options.type, names) << " (known: " << join_names(names) << ")\n";
  return 1;
}

}  // namespace

void add_stages_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<StagesOptions>();
  auto* command = app.add_subcommand("stages", "List stage and resource types, or describe one");
  command->add_option("type", options->type, "a stage or resource type to describe");
  command->add_option("--plugin", options->plugin,
                      "inspect a plugin library: its descriptor, or why it is refused");
  command->callback(
      [&selected, options] { selected = [options] { return stages_command(*options); }; });
}

}  // namespace chatflow::cli
