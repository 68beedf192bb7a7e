// Loads plugins: shared libraries exporting `chatflow_plugin_descriptor` (plugins/sdk/
// chatflow_plugin.h). A library is refused, with its file and the reason, when it cannot be
// opened, lacks the entry point, or was built for another ABI (major differs, or its minor is
// newer than ours). Each stage type it provides becomes a StageTypeInfo whose stages keep the
// library loaded for as long as they live.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/api/registry.h"

struct cf_plugin_descriptor;

namespace chatflow {

class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class PluginLibrary {
 public:
  // Throws PluginError.
  static std::shared_ptr<PluginLibrary> open(const std::string& path);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::string& path() const { return path_; }
  const cf_plugin_descriptor& descriptor() const { return *descriptor_; }
  // Throws PluginError for a malformed type (no name, a request stage without ports...).
  std::vector<StageTypeInfo> stage_types() const;
  // Its tool types (ABI 1.1), as resource types whose resources are ToolExecutorResources.
  std::vector<ResourceTypeInfo> tool_types() const;
  // "plugin NAME VERSION, PATH": where a type came from, for `chatflow stages`.
  std::string origin() const;
  // "name 1.2.0 (MIT), ABI 1.0: description", and its types.
  std::string describe() const;

 private:
  PluginLibrary(std::string path, void* handle, const cf_plugin_descriptor* descriptor)
      : path_(std::move(path)), handle_(handle), descriptor_(descriptor) {}
  std::string path_;
  void* handle_;
  const cf_plugin_descriptor* descriptor_;
  std::weak_ptr<PluginLibrary> self_;
};

// Where a plugin named in YAML is looked for: as written (relative to the pipeline file's
// directory when relative), then in each directory of $CHATFLOW_PLUGIN_PATH (colon-separated).
std::string find_plugin(const std::string& name, const std::string& pipeline_file);

// Every *.so in the directories of $CHATFLOW_PLUGIN_PATH, sorted within each directory.
std::vector<std::string> plugins_on_search_path();

}  // namespace chatflow
