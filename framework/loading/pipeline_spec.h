// A pipeline spec is a pipeline YAML file after all three layers of checks (YAML syntax, each
// stage's config schema, graph semantics): every stage and resource resolved to its type with a
// parsed config, and every port connected. Building it (pipeline.h) creates the live objects.
//
//   version: 1
//   name: chat
//   max_in_flight: 256            # admission limit; more concurrent requests are rejected
//   plugins: []
//   resources:
//     llm: {type: gguf_model, path: "${CHATFLOW_MODEL}"}
//   stages:
//     - {name: exact, type: exact_cache, config: {ttl_s: 3600}, concurrency: unlimited}
//     - ...
//   edges:                        # optional; without one, a stage's default port feeds the next
//     - exact.hit -> emit         # stage in the list, and the last stage's stream goes to the sink
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/api/config_schema.h"
#include "framework/api/diagnostics.h"
#include "framework/api/registry.h"

namespace chatflow {

class PluginLibrary;

struct ResourceSpec {
  std::string name;
  std::shared_ptr<const ResourceTypeInfo> type;
  std::shared_ptr<void> config;
  SourceLocation where;
  std::vector<ResourceReference> references;  // other resources this one uses
  std::string fingerprint;  // its type and configuration as written: equal means unchanged
  // Where each key of its configuration is written (nested keys as kv_cache.type), for errors
  // its create() finds about one key (ConfigKeyError).
  std::map<std::string, SourceLocation> key_locations;
};

struct StageSpec {
  std::string name;
  std::shared_ptr<const StageTypeInfo> type;
  std::shared_ptr<void> config;
  size_t concurrency = kUnlimitedConcurrency;
  SourceLocation where;
  std::vector<ResourceReference> references;
};

// Stands for the request's sink as the target of a connection.
inline constexpr size_t kSinkStage = std::numeric_limits<size_t>::max();

// One port of one stage feeding one stage (or the sink).
struct Connection {
  size_t from_stage = 0;
  PortId from_port = 0;
  size_t to_stage = 0;
  bool declared = false;  // written under `edges:` rather than implied by list order
  SourceLocation where;
};

struct PipelineSpec {
  std::string file;
  std::string name;
  size_t max_in_flight = 256;
  std::vector<std::string> plugins;
  // The plugin libraries whose stage types this spec uses; loaded while the spec lives.
  std::vector<std::shared_ptr<PluginLibrary>> plugin_libraries;
  std::vector<ResourceSpec> resources;  // in creation order: a resource after those it uses
  std::vector<StageSpec> stages;        // stages[0] is the entry
  std::vector<Connection> connections;

  // The connection leaving `stage` through `port`, or nullptr.
  const Connection* connection_from(size_t stage, PortId port) const;
  std::optional<size_t> stage_index(const std::string& name) const;
};

// Reads and checks a pipeline file; nullopt when any error was reported (all of them are).
std::optional<PipelineSpec> load_pipeline_spec(const std::string& path, const Registry& registry,
                                               Diagnostics& diagnostics);

// Same, for YAML text already in memory (`file` is used in locations).
std::optional<PipelineSpec> parse_pipeline_yaml(const std::string& yaml, const std::string& file,
                                                const Registry& registry, Diagnostics& diagnostics);

}  // namespace chatflow
