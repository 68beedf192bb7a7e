// chatflow stages [TYPE]: what types exist, and for one type its ports and config keys, in the
// spirit of gst-inspect. --markdown and --metrics-markdown write the generated references
// (docs/reference/stages.md and metrics.md) from the registry's schemas and the server's table
// of metrics, which a test compares with the checked-in files.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "framework/api/registry.h"
#include "framework/api/suggest.h"
#include "framework/cli/command.h"
#include "framework/loading/plugin_loader.h"
#include "framework/server/exported_metrics.h"

namespace chatflow::cli {
namespace {

struct StagesOptions {
  std::string type;    // empty: list every type
  std::string plugin;  // inspect this plugin library instead
  bool markdown = false;
  bool metrics_markdown = false;
};

// 1048576, not 1.04858e+06; 0.00001, not 1e-05.
std::string format_number(double value) {
  if (std::abs(value) < 1e15 && value == std::floor(value))
    return std::to_string(static_cast<long long>(value));
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed);
  return std::string(buffer, result.ptr);
}

std::string range_text(const KeyInfo& key) {
  if (key.minimum && key.maximum)
    return format_number(*key.minimum) + ".." + format_number(*key.maximum);
  if (key.minimum) return "at least " + format_number(*key.minimum);
  if (key.maximum) return "at most " + format_number(*key.maximum);
  return "";
}

std::string constraints(const KeyInfo& key) {
  std::vector<std::string> parts;
  if (!key.choices.empty()) parts.push_back("one of: " + join_names(key.choices));
  if (key.minimum && key.maximum) {
    parts.push_back("range: " + range_text(key));
  } else if (key.minimum || key.maximum) {
    parts.push_back(range_text(key));
  }
  if (!key.resource_type.empty()) parts.push_back("names a " + key.resource_type + " resource");
  std::string text;
  for (const auto& part : parts)
    text += (text.empty() ? "" : "; ") + part;
  return text;
}

// Every key of a schema with its full name: nested keys as `scheduler.max_seqs`, a list's items
// as `tools[].name` (as its errors name them `tools[1].name`).
struct NamedKey {
  std::string name;
  const KeyInfo* key;
};

void flatten(const ConfigSchema& schema, const std::string& prefix, std::vector<NamedKey>& out) {
  for (const auto& key : schema.keys()) {
    out.push_back({prefix + key.name, &key});
    if (key.nested)
      flatten(*key.nested, prefix + key.name + (key.type == ValueType::object_list ? "[]." : "."),
              out);
  }
}

std::vector<NamedKey> flatten(const ConfigSchema& schema) {
  std::vector<NamedKey> keys;
  flatten(schema, "", keys);
  return keys;
}

// A mapping's default is its keys' defaults, listed below it.
std::string default_column(const KeyInfo& key) {
  if (key.required) return "required";
  if (key.type == ValueType::object) return "";
  return "default " + key.default_text;
}

// `text` broken into lines of at most `width` characters (a longer word gets a line of its own),
// each after `indent`.
std::string wrapped(const std::string& text, const std::string& indent, size_t width) {
  std::istringstream words(text);
  std::string out;
  std::string line;
  std::string word;
  while (words >> word) {
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

constexpr size_t kLineWidth = 100;

// Columns padded to their widest cell and at least two spaces apart, so a long key or type
// never runs into the next column.
std::string padded(const std::string& text, size_t width) {
  return text + std::string(width > text.size() ? width - text.size() : 0, ' ') + "  ";
}

size_t widest(const std::vector<std::string>& texts) {
  size_t width = 0;
  for (const auto& text : texts)
    width = std::max(width, text.size());
  return width;
}

void print_keys(const ConfigSchema& schema) {
  auto keys = flatten(schema);
  if (keys.empty()) {
    std::cout << "    (none)\n";
    return;
  }
  std::vector<std::string> names;
  std::vector<std::string> types;
  for (const auto& [name, key] : keys) {
    names.push_back(name);
    types.push_back(describe(key->type));
  }
  size_t name_width = widest(names);
  size_t type_width = widest(types);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string line = "    " + padded(names[i], name_width) + padded(types[i], type_width) +
                       default_column(*keys[i].key);
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    std::cout << line << "\n" << wrapped(keys[i].key->doc, "        ", kLineWidth);
    if (auto text = constraints(*keys[i].key); !text.empty())
      std::cout << wrapped(text, "        ", kLineWidth);
  }
}

std::string concurrency_text(size_t concurrency) {
  return concurrency == 0   ? std::string("unlimited")
         : concurrency == 1 ? std::string("serial")
                            : std::to_string(concurrency);
}

void describe_stage(const StageTypeInfo& type) {
  std::cout << "Stage type " << type.name << " (" << to_string(type.kind) << " stage, "
            << type.origin << ")\n"
            << wrapped(type.doc, "  ", kLineWidth) << "\n  Ports:\n";
  std::vector<std::string> names;
  std::vector<std::string> kinds;
  for (const auto& port : type.ports) {
    names.push_back(port.name);
    kinds.push_back(std::string(to_string(port.kind)));
  }
  for (size_t i = 0; i < type.ports.size(); ++i) {
    std::cout << "    " << padded(names[i], widest(names)) << padded(kinds[i], widest(kinds))
              << type.ports[i].doc
              << (static_cast<int>(i) == type.default_port ? "  [default]" : "") << "\n";
  }
  std::cout << "\n  Concurrency: " << concurrency_text(type.default_concurrency)
            << " (override with 'concurrency:' on the stage)\n\n  Config keys:\n";
  print_keys(*type.schema);
}

void describe_resource(const ResourceTypeInfo& type) {
  std::cout << "Resource type " << type.name << " (" << type.origin << ")\n"
            << wrapped(type.doc, "  ", kLineWidth) << "\n  Config keys (beside 'type'):\n";
  print_keys(*type.schema);
}

void list_types(const Registry& registry) {
  std::vector<std::string> names = registry.stage_names();
  std::vector<std::string> kinds;
  std::vector<std::string> ports;
  for (const auto& name : names) {
    auto type = registry.find_stage(name);
    kinds.push_back(std::string(to_string(type->kind)));
    ports.push_back(join_names(type->port_names()));
  }
  std::vector<std::string> resources = registry.resource_names();
  // One name column for both lists, so their descriptions line up.
  std::vector<std::string> all_names = names;
  all_names.insert(all_names.end(), resources.begin(), resources.end());
  size_t name_width = widest(all_names);
  std::cout << "Stage types:\n";
  for (size_t i = 0; i < names.size(); ++i) {
    std::cout << "  " << padded(names[i], name_width) << padded(kinds[i], widest(kinds))
              << padded(ports[i], widest(ports)) << registry.find_stage(names[i])->doc << "\n";
  }
  std::cout << "\nResource types:\n";
  for (const auto& name : resources) {
    std::cout << "  " << padded(name, name_width) << registry.find_resource(name)->doc << "\n";
  }
  if (resources.empty()) std::cout << "  (none in this build)\n";
  std::cout << "\n`chatflow stages TYPE` shows a type's ports and config keys.\n";
}

// Built-in types, and those of the plugins on CHATFLOW_PLUGIN_PATH.
Registry registry_with_plugins_on_path() {
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
  return registry;
}

// ---- Markdown (docs/reference/) ----

// Text for a Markdown table cell: code spans kept as they are (a `|` escaped, which GitHub reads
// inside code spans too); outside them, characters Markdown would read as HTML or emphasis
// escaped.
std::string cell(const std::string& text) {
  std::string out;
  bool in_code = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    auto is_word = [&](size_t at) {
      return at < text.size() && std::isalnum(static_cast<unsigned char>(text[at]));
    };
    if (c == '`') {
      in_code = !in_code;
      out += c;
    } else if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else if (in_code) {
      out += c;
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '*' || c == '\\' || c == '[' || c == ']') {
      out += '\\';
      out += c;
    } else if (c == '_' && !(i > 0 && is_word(i - 1) && is_word(i + 1))) {
      out += "\\_";  // only a '_' that could open or close emphasis
    } else {
      out += c;
    }
  }
  return out;
}

std::string code(const std::string& text) {
  // A code span holding a backtick needs a longer fence.
  return text.find('`') == std::string::npos ? "`" + text + "`" : "`` " + text + " ``";
}

std::string short_type(ValueType type) {
  std::string text = describe(type);
  if (type == ValueType::boolean) return "boolean";
  if (text.starts_with("an ")) return text.substr(3);
  if (text.starts_with("a ")) return text.substr(2);
  return text;
}

std::string allowed_column(const KeyInfo& key) {
  std::vector<std::string> parts;
  if (!key.choices.empty()) {
    std::string choices;
    for (const auto& choice : key.choices)
      choices += (choices.empty() ? "" : ", ") + code(choice);
    parts.push_back(choices);
  }
  if (key.minimum || key.maximum) parts.push_back(range_text(key));
  if (!key.resource_type.empty()) {
    // "gguf_model or upstream": each a type.
    std::string types = key.resource_type;
    std::string linked;
    size_t start = 0;
    while (start <= types.size()) {
      size_t end = types.find(" or ", start);
      std::string one = types.substr(start, end == std::string::npos ? end : end - start);
      linked += (linked.empty() ? "" : " or ") + ("[" + code(one) + "](#" + one + ")");
      if (end == std::string::npos) break;
      start = end + 4;
    }
    parts.push_back("names a " + linked + " resource");
  }
  std::string text;
  for (const auto& part : parts)
    text += (text.empty() ? "" : "; ") + part;
  return text;
}

void markdown_keys(const ConfigSchema& schema, std::ostream& out) {
  auto keys = flatten(schema);
  if (keys.empty()) {
    out << "No config keys.\n";
    return;
  }
  out << "| key | type | default | allowed | description |\n|---|---|---|---|---|\n";
  for (const auto& [name, key] : keys) {
    std::string default_text = key->required ? "required"
                               : key->type == ValueType::object || key->default_text.empty()
                                   ? ""
                                   : code(key->default_text);
    out << "| " << code(name) << " | " << short_type(key->type) << " | " << cell(default_text)
        << " | " << allowed_column(*key) << " | " << cell(key->doc) << " |\n";
  }
}

void markdown_stage(const StageTypeInfo& type, std::ostream& out) {
  out << "### " << type.name << "\n\n"
      << "A " << to_string(type.kind) << " stage. " << cell(type.doc) << "\n\n"
      << "| port | kind | carries |\n|---|---|---|\n";
  for (size_t i = 0; i < type.ports.size(); ++i) {
    const auto& port = type.ports[i];
    out << "| " << code(port.name) << (static_cast<int>(i) == type.default_port ? " (default)" : "")
        << " | " << to_string(port.kind) << " | " << cell(port.doc) << " |\n";
  }
  out << "\n"
      << (type.default_port < 0 ? "Every port needs an edge under `edges:`. "
                                : "The default port goes on to the next stage in the list. ")
      << "Concurrency: " << concurrency_text(type.default_concurrency)
      << " (`concurrency:` on the stage overrides it).\n\n";
  markdown_keys(*type.schema, out);
  out << "\n";
}

void markdown_resource(const ResourceTypeInfo& type, std::ostream& out) {
  out << "### " << type.name << "\n\n"
      << cell(type.doc) << " Its keys sit beside `type: " << type.name << "`.\n\n";
  markdown_keys(*type.schema, out);
  out << "\n";
}

void stages_markdown(const Registry& registry, std::ostream& out) {
  out << "# Stage and resource types\n\n"
      << "<!-- Generated by `chatflow stages --markdown > docs/reference/stages.md`: do not edit.\n"
      << "     tests/docs/docs.test.mjs fails when this file and the command's output differ. "
         "-->\n\n"
      << "Every stage type and resource type built into chatflow, with its ports and config "
         "keys,\nfrom the same schemas that check a pipeline file (`chatflow stages TYPE` prints "
         "one type).\nA stage lists its keys under `config:`; a resource lists them beside its "
         "`type:`. Nested keys\nare written `scheduler.max_seqs` (a mapping) or `tools[].name` "
         "(each item of a list).\nPlugins add types of their own: `chatflow stages --plugin "
         "FILE` describes them.\n\n## Stage types\n\n"
      << "| type | kind | ports | what it does |\n|---|---|---|---|\n";
  for (const auto& name : registry.stage_names()) {
    auto type = registry.find_stage(name);
    std::string ports;
    for (const auto& port : type->ports)
      ports += (ports.empty() ? "" : ", ") + code(port.name);
    out << "| [" << code(name) << "](#" << name << ") | " << to_string(type->kind) << " | " << ports
        << " | " << cell(type->doc) << " |\n";
  }
  out << "\n## Resource types\n\n| type | what it is |\n|---|---|\n";
  for (const auto& name : registry.resource_names()) {
    out << "| [" << code(name) << "](#" << name << ") | " << cell(registry.find_resource(name)->doc)
        << " |\n";
  }
  out << "\n## Stages\n\n";
  for (const auto& name : registry.stage_names())
    markdown_stage(*registry.find_stage(name), out);
  out << "## Resources\n\n";
  for (const auto& name : registry.resource_names())
    markdown_resource(*registry.find_resource(name), out);
}

std::string bucket_name(server::MetricBuckets buckets) {
  switch (buckets) {
    case server::MetricBuckets::latency:
      return "request latency";
    case server::MetricBuckets::token_latency:
      return "token latency";
    case server::MetricBuckets::stage_latency:
      return "stage latency";
    case server::MetricBuckets::none:
      break;
  }
  return "";
}

std::string heading_anchor(const std::string& heading) {
  std::string anchor;
  for (char c : heading) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      anchor += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (c == ' ' || c == '-' || c == '_') {
      anchor += c == ' ' ? '-' : c;
    }
  }
  return anchor;
}

void metrics_markdown(std::ostream& out) {
  using namespace server;
  out << "# Metrics\n\n"
      << "<!-- Generated by `chatflow stages --metrics-markdown > docs/reference/metrics.md`: do "
         "not edit.\n     tests/docs/docs.test.mjs fails when this file and the command's output "
         "differ. -->\n\n"
      << "Every metric `chatflow serve` exports at `GET /metrics` (and on "
         "`server.metrics_listen`\nwhen it is set), in Prometheus' text format, from the table "
         "the server registers them\nfrom (`framework/server/exported_metrics.h`). A histogram "
         "`NAME` is exported as `NAME_bucket`\n(with `le`), `NAME_sum` and `NAME_count`; its "
         "bucket bounds are listed at the end.\n\n";
  for (const auto& group : kMetricGroups) {
    out << "## " << group.name << "\n\n"
        << cell(std::string(group.doc)) << "\n\n"
        << "| metric | type | labels | help |\n|---|---|---|---|\n";
    for (const auto& metric : kExportedMetrics) {
      if (metric.group != group.name) continue;
      std::string labels;
      for (size_t i = 0; i < metric.label_count(); ++i)
        labels += (labels.empty() ? "" : ", ") + code(std::string(metric.labels[i]));
      std::string type(to_string(metric.type));
      if (metric.type == MetricType::histogram) {
        std::string buckets = bucket_name(metric.buckets) + " buckets";
        type += " ([" + buckets + "](#" + heading_anchor(buckets) + "))";
      }
      out << "| " << code(std::string(metric.name)) << " | " << type << " | " << labels << " | "
          << cell(std::string(metric.help)) << " |\n";
    }
    out << "\n";
  }
  out << "## Histogram buckets\n\nUpper bounds in seconds (and `+Inf`).\n\n";
  for (MetricBuckets buckets :
       {MetricBuckets::latency, MetricBuckets::token_latency, MetricBuckets::stage_latency}) {
    out << "### " << bucket_name(buckets) << " buckets\n\n";
    std::string bounds;
    for (double bound : bucket_bounds(buckets))
      bounds += (bounds.empty() ? "" : ", ") + format_number(bound);
    out << bounds << "\n\n";
  }
}

int stages_command(const StagesOptions& options) {
  if (options.markdown) {
    // Built-in types only: the reference must not depend on what a machine has installed.
    stages_markdown(builtin_registry(), std::cout);
    return 0;
  }
  if (options.metrics_markdown) {
    metrics_markdown(std::cout);
    return 0;
  }
  if (!options.plugin.empty()) {
    // A plugin inspected on its own: its descriptor, or why this chatflow refuses it (thrown).
    std::cout << PluginLibrary::open(options.plugin)->describe();
    return 0;
  }
  Registry registry = registry_with_plugins_on_path();
  if (options.type.empty()) {
    list_types(registry);
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
  auto* command = app.add_subcommand(
      "stages",
      "List stage and resource types (built-in and on CHATFLOW_PLUGIN_PATH), or describe one");
  auto* type = command->add_option("type", options->type, "a stage or resource type to describe");
  auto* plugin = command->add_option(
      "--plugin", options->plugin,
      "describe a plugin library's types, or say why it is refused (loading it runs its "
      "constructors)");
  auto* markdown = command->add_flag(
      "--markdown", options->markdown,
      "print the reference of every built-in type as Markdown (docs/reference/stages.md)");
  auto* metrics = command->add_flag(
      "--metrics-markdown", options->metrics_markdown,
      "print the reference of every metric the server exports (docs/reference/metrics.md)");
  markdown->excludes(type)->excludes(plugin)->excludes(metrics);
  metrics->excludes(type)->excludes(plugin);
  command->callback(
      [&selected, options] { selected = [options] { return stages_command(*options); }; });
}

}  // namespace chatflow::cli
