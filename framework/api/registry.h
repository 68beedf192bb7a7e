// Registries of stage types and resource types. Built-in types register themselves from their
// own file (CHATFLOW_REGISTER_TYPE); plugins add theirs at load time; tests build their own
// Registry and swap a type for a test double.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/api/config_schema.h"
#include "framework/api/resource.h"
#include "framework/api/stage.h"

namespace chatflow {

enum class StageKind { request, stream };
enum class PortKind { request, stream };

std::string_view to_string(StageKind kind);
std::string_view to_string(PortKind kind);

struct PortInfo {
  std::string name;
  PortKind kind = PortKind::request;
  std::string doc;
};

// A stage type has at most this many ports (each becomes a multifunction_node output).
inline constexpr size_t kMaxPorts = 8;

// How many requests (or chunks) one stage processes at once: 0 means unlimited, 1 serial.
inline constexpr size_t kUnlimitedConcurrency = 0;

// Thrown by a stage or resource factory when the config is valid YAML but cannot be used
// (a file that does not exist, a resource of the wrong type); reported at the stage's location.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StageContext {
 public:
  StageContext(std::string stage_name, const ResourceMap& resources)
      : stage_name_(std::move(stage_name)), resources_(resources) {}

  const std::string& stage_name() const { return stage_name_; }

  template <class T>
  std::shared_ptr<T> resource(const std::string& name) const {
    auto found = resources_.find(name);
    if (found == resources_.end()) throw ConfigError("no resource named '" + name + "'");
    auto typed = std::dynamic_pointer_cast<T>(found->second);
    if (!typed) throw ConfigError("resource '" + name + "' is not of the kind this stage needs");
    return typed;
  }

 private:
  std::string stage_name_;
  const ResourceMap& resources_;
};

struct StageTypeInfo {
  std::string name;
  std::string doc;
  StageKind kind = StageKind::request;
  std::vector<PortInfo> ports;
  // The port that list order connects to the next stage; -1 when every port needs an edge.
  int default_port = 0;
  size_t default_concurrency = kUnlimitedConcurrency;
  std::shared_ptr<const ConfigSchema> schema;
  std::function<std::unique_ptr<Stage>(const void* config, StageContext& context)> create;
  std::string origin = "built-in";  // or the plugin file that provided it
  // For types whose ports come from their configuration (ab_split: one port per arm): the
  // ports of one stage, from its parsed config; throws ConfigError for a config that gives
  // none. `ports` then only documents the type.
  std::function<std::vector<PortInfo>(const void* config)> ports_for_config;

  // Index of the port named `name`, or -1.
  int find_port(const std::string& name) const;
  std::vector<std::string> port_names() const;
};

class ResourceContext {
 public:
  ResourceContext(std::string resource_name, const ResourceMap& created)
      : resource_name_(std::move(resource_name)), created_(created) {}
  const std::string& resource_name() const { return resource_name_; }

  // Another resource this one's config references (created before this one).
  template <class T>
  std::shared_ptr<T> resource(const std::string& name) const {
    auto found = created_.find(name);
    if (found == created_.end()) throw ConfigError("no resource named '" + name + "'");
    auto typed = std::dynamic_pointer_cast<T>(found->second);
    if (!typed) throw ConfigError("resource '" + name + "' is not of the kind this resource needs");
    return typed;
  }

 private:
  std::string resource_name_;
  const ResourceMap& created_;
};

struct ResourceTypeInfo {
  std::string name;
  std::string doc;
  std::shared_ptr<const ConfigSchema> schema;
  std::function<std::shared_ptr<Resource>(const void* config, ResourceContext& context)> create;
  std::string origin = "built-in";
};

// Declares a stage type with a typed config struct:
//
//   StageTypeBuilder<EchoConfig> type("echo", StageKind::request, "what it does");
//   type.port("out", PortKind::stream, "the echoed words");
//   type.config().key("prefix", &EchoConfig::prefix, "text sent first");
//   type.create([](const EchoConfig& config, StageContext&) {
//     return std::make_unique<Echo>(config);
//   });
template <class Config>
class StageTypeBuilder {
 public:
  StageTypeBuilder(std::string name, StageKind kind, std::string doc) {
    info_.name = std::move(name);
    info_.kind = kind;
    info_.doc = std::move(doc);
  }
  StageTypeBuilder& port(std::string name, PortKind kind, std::string doc) {
    info_.ports.push_back({std::move(name), kind, std::move(doc)});
    return *this;
  }
  // No port is connected by list order: every port needs an explicit edge.
  StageTypeBuilder& no_default_port() {
    info_.default_port = -1;
    return *this;
  }
  template <class PortsOf>
  StageTypeBuilder& ports_from_config(PortsOf ports_of) {
    info_.ports_for_config = [ports_of](const void* config) {
      return ports_of(*static_cast<const Config*>(config));
    };
    return *this;
  }
  StageTypeBuilder& default_port(const std::string& name) {
    info_.default_port = info_.find_port(name);
    return *this;
  }
  StageTypeBuilder& concurrency(size_t limit) {
    info_.default_concurrency = limit;
    return *this;
  }
  SchemaBuilder<Config>& config() { return schema_; }

  template <class Factory>
  StageTypeBuilder& create(Factory factory) {
    info_.create = [factory](const void* config, StageContext& context) -> std::unique_ptr<Stage> {
      return factory(*static_cast<const Config*>(config), context);
    };
    return *this;
  }

  StageTypeInfo build() const {
    StageTypeInfo info = info_;
    info.schema = schema_.schema();
    return info;
  }

 private:
  StageTypeInfo info_;
  SchemaBuilder<Config> schema_;
};

template <class Config>
class ResourceTypeBuilder {
 public:
  ResourceTypeBuilder(std::string name, std::string doc) {
    info_.name = std::move(name);
    info_.doc = std::move(doc);
  }
  SchemaBuilder<Config>& config() { return schema_; }

  template <class Factory>
  ResourceTypeBuilder& create(Factory factory) {
    info_.create = [factory](const void* config,
                             ResourceContext& context) -> std::shared_ptr<Resource> {
      return factory(*static_cast<const Config*>(config), context);
    };
    return *this;
  }

  ResourceTypeInfo build() const {
    ResourceTypeInfo info = info_;
    info.schema = schema_.schema();
    return info;
  }

 private:
  ResourceTypeInfo info_;
  SchemaBuilder<Config> schema_;
};

class Registry {
 public:
  // Throws std::invalid_argument when the name is taken or the type is malformed
  // (no ports, too many ports, a stream stage whose port is not a single stream port...).
  void add(StageTypeInfo type);
  void add(ResourceTypeInfo type);

  std::shared_ptr<const StageTypeInfo> find_stage(const std::string& name) const;
  std::shared_ptr<const ResourceTypeInfo> find_resource(const std::string& name) const;
  std::vector<std::string> stage_names() const;
  std::vector<std::string> resource_names() const;

 private:
  std::map<std::string, std::shared_ptr<const StageTypeInfo>> stages_;
  std::map<std::string, std::shared_ptr<const ResourceTypeInfo>> resources_;
};

// The registry the built-in stage and resource types add themselves to.
Registry& builtin_registry();

namespace detail {
bool register_builtin(StageTypeInfo (*describe)());
bool register_builtin(ResourceTypeInfo (*describe)());
}  // namespace detail

}  // namespace chatflow

// At namespace scope in a built-in stage's file: registers the type its function describes.
#define CHATFLOW_REGISTER_TYPE(describe_function)                              \
  [[maybe_unused]] static const bool chatflow_registered_##describe_function = \
      ::chatflow::detail::register_builtin(&describe_function)
