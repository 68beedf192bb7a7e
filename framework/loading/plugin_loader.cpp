#include "framework/loading/plugin_loader.h"

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "framework/api/tool_executor.h"
#include "plugins/sdk/chatflow_plugin.h"

namespace chatflow {

namespace {

// --- The host side of the C ABI: what a plugin may ask of chatflow. ---

Request& request_of(cf_request* request) {
  return *reinterpret_cast<Request*>(request);
}
const Request& request_of(const cf_request* request) {
  return *reinterpret_cast<const Request*>(request);
}
const DynamicConfig& config_of(const cf_config* config) {
  return *reinterpret_cast<const DynamicConfig*>(config);
}

const char* config_string(const cf_config* config, const char* key) {
  const auto& values = config_of(config).values;
  auto found = values.find(key);
  return found == values.end() ? "" : found->second.c_str();
}
int64_t config_integer(const cf_config* config, const char* key) {
  return std::strtoll(config_string(config, key), nullptr, 10);
}
double config_number(const cf_config* config, const char* key) {
  return std::strtod(config_string(config, key), nullptr);
}
int config_boolean(const cf_config* config, const char* key) {
  return std::string_view(config_string(config, key)) == "true";
}
size_t config_list_size(const cf_config* config, const char* key) {
  const auto& lists = config_of(config).lists;
  auto found = lists.find(key);
  return found == lists.end() ? 0 : found->second.size();
}
const char* config_list_item(const cf_config* config, const char* key, size_t index) {
  const auto& lists = config_of(config).lists;
  auto found = lists.find(key);
  if (found == lists.end() || index >= found->second.size()) return "";
  return found->second[index].c_str();
}

size_t message_count(const cf_request* request) {
  return request_of(request).messages.size();
}
const char* message_role(const cf_request* request, size_t index) {
  const auto& messages = request_of(request).messages;
  return index < messages.size() ? messages[index].role.c_str() : "";
}
const char* message_content(const cf_request* request, size_t index) {
  const auto& messages = request_of(request).messages;
  return index < messages.size() ? messages[index].content.c_str() : "";
}
void set_message_content(cf_request* request, size_t index, const char* content) {
  auto& messages = request_of(request).messages;
  if (index < messages.size() && content) messages[index].content = content;
}
const char* prompt(const cf_request* request) {
  return request_of(request).prompt.c_str();
}
const char* tenant(const cf_request* request) {
  return request_of(request).identity.tenant.c_str();
}
const char* user(const cf_request* request) {
  return request_of(request).identity.user.c_str();
}
const char* model(const cf_request* request) {
  return request_of(request).model.c_str();
}
void annotate(cf_request* request, const char* key, const char* value) {
  if (key && value) request_of(request).annotate(key, value);
}
void set_response_header(cf_request* request, const char* name, const char* value) {
  if (name && value) request_of(request).set_response_header(name, value);
}
void emit(cf_stream* stream, const char* text, size_t length) {
  if (text && length > 0)
    reinterpret_cast<StreamContext*>(stream)->emit(Chunk::delta(std::string(text, length)));
}
void log(int level, const char* message) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "chatflow: plugin %s: %s\n",
               level >= 2   ? "error"
               : level == 1 ? "warning"
                            : "info",
               message ? message : "");
}

void tool_result_append(cf_tool_result* result, const char* text, size_t length) {
  if (result && text && length > 0) reinterpret_cast<std::string*>(result)->append(text, length);
}

const cf_host_api kHost = {sizeof(cf_host_api),
                           CHATFLOW_PLUGIN_ABI_MINOR,
                           config_string,
                           config_integer,
                           config_number,
                           config_boolean,
                           config_list_size,
                           config_list_item,
                           message_count,
                           message_role,
                           message_content,
                           set_message_content,
                           prompt,
                           tenant,
                           user,
                           model,
                           annotate,
                           set_response_header,
                           emit,
                           log,
                           tool_result_append};

constexpr size_t kErrorSize = 512;

// A plugin object made by its type's create(); a refusal is a configuration error with the
// plugin's reason.
template <class Type>
void* create_instance(const Type& type, const DynamicConfig& config, const char* what) {
  char error[kErrorSize] = "";
  void* instance =
      type.create(&kHost, reinterpret_cast<const cf_config*>(&config), error, sizeof error);
  if (!instance) {
    throw ConfigError("plugin " + std::string(what) + " '" + std::string(type.type_name) +
                      "' refused its configuration: " + (error[0] ? error : "no reason given"));
  }
  return instance;
}

// --- Stages backed by a plugin's function table. ---

class PluginInstance {
 public:
  PluginInstance(std::shared_ptr<const PluginLibrary> library, const cf_stage_type& type,
                 DynamicConfig config)
      : library_(std::move(library)),
        type_(type),
        config_(std::move(config)),
        instance_(create_instance(type_, config_, "stage type")) {}
  ~PluginInstance() {
    if (type_.destroy) type_.destroy(instance_);
  }
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  // A failure the plugin reported, as the client sees it.
  [[noreturn]] void fail(int code, const char* error) const {
    std::string where = "stage type '" + std::string(type_.type_name) + "' of plugin '" +
                        library_->descriptor().name + "'";
    if (code == CF_FAIL) {
      throw RequestFailure(400, "invalid_request_error",
                           std::string(error[0] ? error : "refused by " + where));
    }
    throw RequestFailure(500, "server_error",
                         where + " failed: " + (error[0] ? error : "no reason given"));
  }

  const cf_stage_type& type() const { return type_; }
  void* instance() const { return instance_; }

 private:
  std::shared_ptr<const PluginLibrary> library_;  // keeps the code loaded while we live
  const cf_stage_type& type_;
  DynamicConfig config_;
  void* instance_ = nullptr;
};

class PluginRequestStage final : public RequestStage {
 public:
  explicit PluginRequestStage(std::unique_ptr<PluginInstance> plugin)
      : plugin_(std::move(plugin)) {}

  Route process(Request& request, StageIo&) override {
    char error[kErrorSize] = "";
    int port = plugin_->type().process_request(
        plugin_->instance(), reinterpret_cast<cf_request*>(&request), error, sizeof error);
    if (port >= 0 && static_cast<size_t>(port) < plugin_->type().port_count)
      return Route::to(static_cast<PortId>(port));
    if (port >= 0) {
      std::snprintf(error, sizeof error, "it chose port %d of %zu", port,
                    plugin_->type().port_count);
      plugin_->fail(CF_CRASH, error);
    }
    plugin_->fail(port, error);
  }

 private:
  std::unique_ptr<PluginInstance> plugin_;
};

class PluginStreamStage final : public StreamStage {
 public:
  explicit PluginStreamStage(std::unique_ptr<PluginInstance> plugin) : plugin_(std::move(plugin)) {}

  void process(StreamContext& context, Chunk chunk) override {
    const cf_stage_type& type = plugin_->type();
    auto& state = context.state<State>(*plugin_);
    if (!state.opened) {
      state.opened = true;
      if (type.open_stream)
        state.data = type.open_stream(plugin_->instance(),
                                      reinterpret_cast<cf_request*>(&context.request()));
    }
    // The C ABI hands a plugin the text only: the reasoning and structured tool calls pass on
    // as they are, ahead of what it makes of the text.
    if (!chunk.reasoning.empty() || !chunk.tool_calls.empty()) {
      Chunk passed;
      passed.reasoning = std::move(chunk.reasoning);
      passed.tool_calls = std::move(chunk.tool_calls);
      context.emit(std::move(passed));
    }
    char error[kErrorSize] = "";
    int result = type.process_chunk(plugin_->instance(), state.data,
                                    reinterpret_cast<cf_request*>(&context.request()),
                                    chunk.text.data(), chunk.text.size(), chunk.is_final() ? 1 : 0,
                                    reinterpret_cast<cf_stream*>(&context), error, sizeof error);
    if (result != 0) plugin_->fail(result == CF_FAIL ? CF_FAIL : CF_CRASH, error);
    if (chunk.is_final()) {
      Chunk last;
      last.finish = chunk.finish;
      last.usage = chunk.usage;
      context.emit(std::move(last));
    }
  }

 private:
  struct State final : StreamState {
    explicit State(const PluginInstance& plugin) : plugin(plugin) {}
    ~State() override {
      if (opened && plugin.type().close_stream) plugin.type().close_stream(plugin.instance(), data);
    }
    const PluginInstance& plugin;
    bool opened = false;
    void* data = nullptr;
  };

  std::unique_ptr<PluginInstance> plugin_;
};

ValueType value_type_of(cf_value_type type) {
  switch (type) {
    case CF_VALUE_INTEGER:
      return ValueType::integer;
    case CF_VALUE_NUMBER:
      return ValueType::number;
    case CF_VALUE_BOOLEAN:
      return ValueType::boolean;
    case CF_VALUE_STRING_LIST:
      return ValueType::string_list;
    default:
      return ValueType::string;
  }
}

// A plugin's tool type as an agent's executor; the resource keeps the library loaded.
class PluginTool final : public ToolExecutorResource {
 public:
  PluginTool(std::shared_ptr<const PluginLibrary> library, const cf_tool_type& type,
             DynamicConfig config)
      : library_(std::move(library)),
        type_(type),
        config_(std::move(config)),
        instance_(create_instance(type_, config_, "tool type")) {}
  ~PluginTool() override {
    if (type_.destroy) type_.destroy(instance_);
  }
  PluginTool(const PluginTool&) = delete;
  PluginTool& operator=(const PluginTool&) = delete;

  ToolOutcome call(const std::string& arguments, const ToolCallContext& context) const override {
    cf_tool_call call{arguments.data(),
                      arguments.size(),
                      context.identity ? context.identity->tenant.c_str() : "",
                      context.identity ? context.identity->user.c_str() : "",
                      context.request_id.c_str(),
                      std::chrono::duration<double>(context.deadline - Clock::now()).count()};
    std::string result;
    char error[kErrorSize] = "";
    int code = type_.call(instance_, &call, reinterpret_cast<cf_tool_result*>(&result), error,
                          sizeof error);
    if (code == 0) return {"ok", std::move(result), 1};
    std::string why = error[0] ? error : "no reason given";
    if (code != CF_FAIL) {
      log(2, ("tool type '" + std::string(type_.type_name) + "' of plugin '" +
              library_->descriptor().name + "' failed: " + why)
                 .c_str());
    }
    return {"error", why, 1};
  }

 private:
  std::shared_ptr<const PluginLibrary> library_;
  const cf_tool_type& type_;
  DynamicConfig config_;
  void* instance_ = nullptr;
};

}  // namespace

std::shared_ptr<PluginLibrary> PluginLibrary::open(const std::string& path) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* reason = dlerror();
    throw PluginError(path + ": cannot load the plugin: " + (reason ? reason : "unknown reason"));
  }
  auto entry = reinterpret_cast<cf_plugin_entry>(dlsym(handle, CHATFLOW_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    dlclose(handle);
    throw PluginError(path + ": not a chatflow plugin: it has no '" +
                      std::string(CHATFLOW_PLUGIN_ENTRY_SYMBOL) + "' entry point");
  }
  const cf_plugin_descriptor* descriptor = entry();
  auto refuse = [&](const std::string& reason) {
    dlclose(handle);
    throw PluginError(path + ": refused: " + reason);
  };
  if (!descriptor) refuse("its entry point returned no descriptor");
  std::string host_version =
      std::to_string(CHATFLOW_PLUGIN_ABI_MAJOR) + "." + std::to_string(CHATFLOW_PLUGIN_ABI_MINOR);
  std::string plugin_version =
      std::to_string(descriptor->abi_major) + "." + std::to_string(descriptor->abi_minor);
  if (descriptor->abi_major != CHATFLOW_PLUGIN_ABI_MAJOR) {
    refuse("built for plugin ABI " + plugin_version + ", this chatflow has ABI " + host_version +
           " (the major versions must be equal; rebuild the plugin against this SDK)");
  }
  if (descriptor->abi_minor > CHATFLOW_PLUGIN_ABI_MINOR) {
    refuse("built for plugin ABI " + plugin_version + ", newer than this chatflow's ABI " +
           host_version + " (upgrade chatflow, or build the plugin against this SDK)");
  }
  if (!descriptor->name || !*descriptor->name) refuse("its descriptor has no name");
  if (descriptor->abi_minor >= 1 && descriptor->tool_type_count > 0 && !descriptor->tool_types) {
    refuse("it declares " + std::to_string(descriptor->tool_type_count) +
           " tool types but no table");
  }
  if (descriptor->stage_type_count > 0 && !descriptor->stage_types)
    refuse("its descriptor lists stage types but gives none");
  auto library = std::shared_ptr<PluginLibrary>(new PluginLibrary(path, handle, descriptor));
  library->self_ = library;
  library->stage_types();  // malformed types are refused now, not when first used
  library->tool_types();
  return library;
}

PluginLibrary::~PluginLibrary() {
  if (handle_) dlclose(handle_);
}

// The configuration keys a plugin declares for a stage or tool type, as a schema.
template <class Malformed>
std::shared_ptr<const ConfigSchema> schema_of(const cf_config_key* keys, size_t count,
                                              const Malformed& malformed) {
  DynamicSchemaBuilder schema;
  for (size_t k = 0; k < count; ++k) {
    const cf_config_key& key = keys[k];
    if (!key.name) malformed("has a configuration key without a name");
    schema.key(key.name, value_type_of(key.type), key.default_value ? key.default_value : "",
               key.required != 0 || !key.default_value, key.doc ? key.doc : "");
  }
  return schema.schema();
}

std::string PluginLibrary::origin() const {
  return std::string("plugin ") + descriptor_->name + " " +
         (descriptor_->version ? descriptor_->version : "") + ", " + path_;
}

std::vector<StageTypeInfo> PluginLibrary::stage_types() const {
  std::vector<StageTypeInfo> types;
  for (size_t i = 0; i < descriptor_->stage_type_count; ++i) {
    const cf_stage_type& type = descriptor_->stage_types[i];
    auto malformed = [&](const std::string& reason) {
      throw PluginError(path_ + ": refused: stage type " + std::to_string(i + 1) + " (" +
                        (type.type_name ? type.type_name : "unnamed") + ") " + reason);
    };
    if (!type.type_name || !*type.type_name) malformed("has no name");
    if (!type.create) malformed("has no create function");
    StageTypeInfo info;
    info.name = type.type_name;
    info.doc = std::string(type.doc ? type.doc : "") + " [plugin " + descriptor_->name + " " +
               (descriptor_->version ? descriptor_->version : "") + "]";
    if (type.kind == CF_STAGE_REQUEST) {
      if (!type.process_request) malformed("is a request stage without process_request");
      if (type.port_count == 0 || !type.ports) malformed("is a request stage without ports");
      info.kind = StageKind::request;
      for (size_t p = 0; p < type.port_count; ++p) {
        if (!type.ports[p].name) malformed("has a port without a name");
        info.ports.push_back(
            {type.ports[p].name, PortKind::request, type.ports[p].doc ? type.ports[p].doc : ""});
      }
    } else if (type.kind == CF_STAGE_STREAM) {
      if (!type.process_chunk) malformed("is a stream stage without process_chunk");
      info.kind = StageKind::stream;
      info.ports.push_back({"out", PortKind::stream, "the rewritten stream"});
    } else {
      malformed("has an unknown kind " + std::to_string(static_cast<int>(type.kind)));
    }
    info.schema = schema_of(type.config_keys, type.config_key_count, malformed);
    info.origin = origin();
    // With several ports, list order cannot guess where a request goes: each needs an edge.
    info.default_port = info.ports.size() == 1 ? 0 : -1;
    std::shared_ptr<const PluginLibrary> library = self_.lock();
    bool stream = type.kind == CF_STAGE_STREAM;
    info.create = [library, &type, stream](const void* config,
                                           StageContext&) -> std::unique_ptr<Stage> {
      auto plugin = std::make_unique<PluginInstance>(library, type,
                                                     *static_cast<const DynamicConfig*>(config));
      if (stream) return std::make_unique<PluginStreamStage>(std::move(plugin));
      return std::make_unique<PluginRequestStage>(std::move(plugin));
    };
    types.push_back(std::move(info));
  }
  return types;
}

std::vector<ResourceTypeInfo> PluginLibrary::tool_types() const {
  std::vector<ResourceTypeInfo> types;
  if (descriptor_->abi_minor < 1) return types;  // the fields did not exist before 1.1
  for (size_t i = 0; i < descriptor_->tool_type_count; ++i) {
    const cf_tool_type& type = descriptor_->tool_types[i];
    auto malformed = [&](const std::string& reason) {
      throw PluginError(path_ + ": refused: tool type " + std::to_string(i + 1) + " (" +
                        (type.type_name ? type.type_name : "unnamed") + ") " + reason);
    };
    if (!type.type_name || !*type.type_name) malformed("has no name");
    if (!type.create || !type.call) malformed("lacks its create or call function");
    ResourceTypeInfo info;
    info.name = type.type_name;
    info.doc = std::string(type.doc ? type.doc : "") + " [tool type of plugin " +
               descriptor_->name + " " + (descriptor_->version ? descriptor_->version : "") + "]";
    info.schema = schema_of(type.config_keys, type.config_key_count, malformed);
    info.origin = origin();
    std::shared_ptr<const PluginLibrary> library = self_.lock();
    info.create = [library, &type](const void* config,
                                   ResourceContext&) -> std::shared_ptr<Resource> {
      return std::make_shared<PluginTool>(library, type,
                                          *static_cast<const DynamicConfig*>(config));
    };
    types.push_back(std::move(info));
  }
  return types;
}

std::string PluginLibrary::describe() const {
  std::ostringstream text;
  const cf_plugin_descriptor& d = *descriptor_;
  text << d.name << " " << (d.version ? d.version : "?") << " (" << (d.license ? d.license : "?")
       << "), plugin ABI " << d.abi_major << "." << d.abi_minor << ", from " << path_ << "\n";
  if (d.description) text << "  " << d.description << "\n";
  for (size_t i = 0; i < d.stage_type_count; ++i) {
    const cf_stage_type& type = d.stage_types[i];
    text << "  stage " << type.type_name << " ("
         << (type.kind == CF_STAGE_STREAM ? "stream" : "request")
         << "): " << (type.doc ? type.doc : "") << "\n";
    if (type.kind == CF_STAGE_REQUEST) {
      for (size_t p = 0; p < type.port_count; ++p)
        text << "    port " << type.ports[p].name << ": "
             << (type.ports[p].doc ? type.ports[p].doc : "") << "\n";
    }
    for (size_t k = 0; k < type.config_key_count; ++k) {
      const cf_config_key& key = type.config_keys[k];
      text << "    " << key.name << " (" << chatflow::describe(value_type_of(key.type))
           << (key.required || !key.default_value ? ", required"
                                                  : std::string(", default ") + key.default_value)
           << "): " << (key.doc ? key.doc : "") << "\n";
    }
  }
  for (size_t i = 0; d.abi_minor >= 1 && i < d.tool_type_count; ++i) {
    const cf_tool_type& type = d.tool_types[i];
    text << "  tool " << type.type_name << ": " << (type.doc ? type.doc : "") << "\n";
    for (size_t k = 0; k < type.config_key_count; ++k) {
      const cf_config_key& key = type.config_keys[k];
      text << "    " << key.name << " (" << chatflow::describe(value_type_of(key.type))
           << (key.required || !key.default_value ? ", required"
                                                  : std::string(", default ") + key.default_value)
           << "): " << (key.doc ? key.doc : "") << "\n";
    }
  }
  return text.str();
}

std::string find_plugin(const std::string& name, const std::string& pipeline_file) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::path written(name);
  if (written.is_absolute()) return name;
  fs::path beside = fs::path(pipeline_file).parent_path() / written;
  if (fs::exists(beside, error)) return beside.string();
  if (fs::exists(written, error)) return written.string();
  if (const char* search = std::getenv("CHATFLOW_PLUGIN_PATH")) {
    std::string rest = search;
    while (!rest.empty()) {
      size_t colon = rest.find(':');
      fs::path candidate = fs::path(rest.substr(0, colon)) / written;
      if (!rest.substr(0, colon).empty() && fs::exists(candidate, error)) return candidate.string();
      rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    }
  }
  return beside.string();
}

std::vector<std::string> plugins_on_search_path() {
  std::vector<std::string> found;
  const char* search = std::getenv("CHATFLOW_PLUGIN_PATH");
  if (!search) return found;
  std::string rest = search;
  while (!rest.empty()) {
    size_t colon = rest.find(':');
    std::string directory = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    std::error_code error;
    if (directory.empty() || !std::filesystem::is_directory(directory, error)) continue;
    std::vector<std::string> libraries;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
      if (entry.path().extension() == ".so") libraries.push_back(entry.path().string());
    }
    std::sort(libraries.begin(), libraries.end());
    found.insert(found.end(), libraries.begin(), libraries.end());
  }
  return found;
}

}  // namespace chatflow
