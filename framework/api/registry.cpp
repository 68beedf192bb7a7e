#include "framework/api/registry.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace chatflow {

std::string_view to_string(StageKind kind) {
  return kind == StageKind::request ? "request" : "stream";
}

std::string_view to_string(PortKind kind) {
  return kind == PortKind::request ? "request" : "stream";
}

int StageTypeInfo::find_port(const std::string& port_name) const {
  for (size_t i = 0; i < ports.size(); ++i) {
    if (ports[i].name == port_name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<std::string> StageTypeInfo::port_names() const {
  std::vector<std::string> names;
  for (const auto& port : ports)
    names.push_back(port.name);
  return names;
}

namespace {

bool is_type_name(const std::string& name) {
  if (name.empty() || !std::islower(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::islower(static_cast<unsigned char>(c)) &&
        !std::isdigit(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

void check_stage_type(const StageTypeInfo& type) {
  auto refuse = [&](const std::string& why) {
    throw std::invalid_argument("stage type '" + type.name + "': " + why);
  };
  if (!is_type_name(type.name)) refuse("the name must be lower_snake_case");
  if (type.ports.empty()) refuse("it declares no ports");
  if (type.ports.size() > kMaxPorts) {
    refuse("it declares " + std::to_string(type.ports.size()) + " ports; at most " +
           std::to_string(kMaxPorts) + " are supported");
  }
  std::set<std::string> names;
  for (const auto& port : type.ports) {
    if (!is_type_name(port.name)) refuse("port name '" + port.name + "' must be lower_snake_case");
    if (!names.insert(port.name).second) refuse("port '" + port.name + "' is declared twice");
  }
  if (type.kind == StageKind::stream &&
      (type.ports.size() != 1 || type.ports[0].kind != PortKind::stream)) {
    refuse("a stream stage has exactly one port, a stream port");
  }
  if (type.default_port < -1 || type.default_port >= static_cast<int>(type.ports.size())) {
    refuse("its default port does not exist");
  }
  if (!type.create) refuse("it has no factory");
  if (!type.schema) refuse("it has no config schema");
}

}  // namespace

void Registry::add(StageTypeInfo type) {
  check_stage_type(type);
  if (stages_.count(type.name)) {
    throw std::invalid_argument("stage type '" + type.name + "' is already registered (by " +
                                stages_.at(type.name)->origin + ")");
  }
  std::string name = type.name;
  stages_.emplace(std::move(name), std::make_shared<const StageTypeInfo>(std::move(type)));
}

void Registry::add(ResourceTypeInfo type) {
  if (!is_type_name(type.name)) {
    throw std::invalid_argument("resource type '" + type.name +
                                "': the name must be lower_snake_case");
  }
  if (!type.create || !type.schema) {
    throw std::invalid_argument("resource type '" + type.name + "' has no factory or schema");
  }
  if (resources_.count(type.name)) {
    throw std::invalid_argument("resource type '" + type.name + "' is already registered (by " +
                                resources_.at(type.name)->origin + ")");
  }
  std::string name = type.name;
  resources_.emplace(std::move(name), std::make_shared<const ResourceTypeInfo>(std::move(type)));
}

std::shared_ptr<const StageTypeInfo> Registry::find_stage(const std::string& name) const {
  auto found = stages_.find(name);
  return found == stages_.end() ? nullptr : found->second;
}

std::shared_ptr<const ResourceTypeInfo> Registry::find_resource(const std::string& name) const {
  auto found = resources_.find(name);
  return found == resources_.end() ? nullptr : found->second;
}

std::vector<std::string> Registry::stage_names() const {
  std::vector<std::string> names;
  for (const auto& [name, type] : stages_)
    names.push_back(name);
  return names;
}

std::vector<std::string> Registry::resource_names() const {
  std::vector<std::string> names;
  for (const auto& [name, type] : resources_)
    names.push_back(name);
  return names;
}

Registry& builtin_registry() {
  static Registry registry;
  return registry;
}

namespace detail {

// A malformed or duplicate built-in type is a bug in chatflow itself: stop at start-up with the
// reason rather than run with a type missing.
template <class Describe>
bool register_or_abort(Describe describe) {
  try {
    builtin_registry().add(describe());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "chatflow: cannot register a built-in type: %s\n", error.what());
    std::abort();
  }
  return true;
}

bool register_builtin(StageTypeInfo (*describe)()) {
  return register_or_abort(describe);
}
bool register_builtin(ResourceTypeInfo (*describe)()) {
  return register_or_abort(describe);
}

}  // namespace detail
}  // namespace chatflow
