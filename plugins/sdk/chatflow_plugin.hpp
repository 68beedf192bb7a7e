// A thin header-only C++ layer over chatflow_plugin.h: write a stage as a class, let this file
// build the C function tables, and turn exceptions into errors at the boundary (a
// chatflow_plugin::Failure becomes a 400 with its message, anything else a 500).
//
//   class Shout : public chatflow_plugin::StreamStage {
//    public:
//     explicit Shout(const chatflow_plugin::Config&) {}
//     void chunk(chatflow_plugin::Request&, std::string_view text, bool, chatflow_plugin::Output&
//     out,
//                void*) override { ... out.emit(upper); }
//   };
//   static const cf_stage_type kTypes[] = {chatflow_plugin::stream_stage_type<Shout>("shout",
//   "...", nullptr, 0)}; CHATFLOW_PLUGIN("shout", "1.0.0", "MIT", "Upper-cases the answer", kTypes)
#ifndef CHATFLOW_PLUGIN_HPP
#define CHATFLOW_PLUGIN_HPP

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chatflow_plugin.h"

namespace chatflow_plugin {

// Fails the request with a 400 and this message.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Config {
 public:
  Config(const cf_host_api* host, const cf_config* config) : host_(host), config_(config) {}
  std::string string(const char* key) const { return host_->config_string(config_, key); }
  int64_t integer(const char* key) const { return host_->config_integer(config_, key); }
  double number(const char* key) const { return host_->config_number(config_, key); }
  bool boolean(const char* key) const { return host_->config_boolean(config_, key) != 0; }
  std::vector<std::string> list(const char* key) const {
    std::vector<std::string> items;
    for (size_t i = 0; i < host_->config_list_size(config_, key); ++i)
      items.emplace_back(host_->config_list_item(config_, key, i));
    return items;
  }
  const cf_host_api* host() const { return host_; }

 private:
  const cf_host_api* host_;
  const cf_config* config_;
};

class Request {
 public:
  Request(const cf_host_api* host, cf_request* request) : host_(host), request_(request) {}
  size_t message_count() const { return host_->message_count(request_); }
  std::string role(size_t index) const { return host_->message_role(request_, index); }
  std::string content(size_t index) const { return host_->message_content(request_, index); }
  void set_content(size_t index, const std::string& text) {
    host_->set_message_content(request_, index, text.c_str());
  }
  // The newest user message (or a completion's prompt).
  std::string question() const {
    for (size_t i = message_count(); i > 0; --i) {
      if (role(i - 1) == "user") return content(i - 1);
    }
    return host_->prompt(request_);
  }
  std::string tenant() const { return host_->tenant(request_); }
  std::string user() const { return host_->user(request_); }
  std::string model() const { return host_->model(request_); }
  void annotate(const std::string& key, const std::string& value) {
    host_->annotate(request_, key.c_str(), value.c_str());
  }
  void set_response_header(const std::string& name, const std::string& value) {
    host_->set_response_header(request_, name.c_str(), value.c_str());
  }

 private:
  const cf_host_api* host_;
  cf_request* request_;
};

class Output {
 public:
  Output(const cf_host_api* host, cf_stream* stream) : host_(host), stream_(stream) {}
  void emit(std::string_view text) { host_->emit(stream_, text.data(), text.size()); }

 private:
  const cf_host_api* host_;
  cf_stream* stream_;
};

class RequestStage {
 public:
  virtual ~RequestStage() = default;
  // The port the request leaves through (0-based, in the order the type declares them).
  virtual int process(Request& request) = 0;
};

class StreamStage {
 public:
  virtual ~StreamStage() = default;
  // Per-request state, or nullptr; deleted with `delete_state`.
  virtual void* open(Request&) { return nullptr; }
  virtual void delete_state(void*) {}
  // Each chunk's text in order; `last` on the final one (flush what is held back).
  virtual void chunk(Request& request, std::string_view text, bool last, Output& out,
                     void* state) = 0;
};

namespace detail {

inline void copy_error(const char* message, char* error, size_t size) {
  if (size == 0) return;
  std::strncpy(error, message, size - 1);
  error[size - 1] = '\0';
}

template <class Instance>
struct Holder {
  const cf_host_api* host;
  std::unique_ptr<Instance> stage;
};

template <class Instance>
void* create(const cf_host_api* host, const cf_config* config, char* error, size_t size) {
  try {
    return new Holder<Instance>{host, std::make_unique<Instance>(Config(host, config))};
  } catch (const std::exception& failure) {
    copy_error(failure.what(), error, size);
  } catch (...) {
    copy_error("unknown exception while creating the stage", error, size);
  }
  return nullptr;
}

template <class Instance>
void destroy(void* instance) {
  delete static_cast<Holder<Instance>*>(instance);
}

// Runs `body`; an exception becomes CF_FAIL (a Failure) or CF_CRASH, with its message.
template <class Body>
int guarded(Body&& body, char* error, size_t size) {
  try {
    return body();
  } catch (const Failure& failure) {
    copy_error(failure.what(), error, size);
    return CF_FAIL;
  } catch (const std::exception& failure) {
    copy_error(failure.what(), error, size);
  } catch (...) {
    copy_error("unknown exception", error, size);
  }
  return CF_CRASH;
}

template <class Instance>
int process_request(void* instance, cf_request* request, char* error, size_t size) {
  auto* holder = static_cast<Holder<Instance>*>(instance);
  return guarded(
      [&] {
        Request wrapped(holder->host, request);
        return holder->stage->process(wrapped);
      },
      error, size);
}

template <class Instance>
void* open_stream(void* instance, cf_request* request) {
  auto* holder = static_cast<Holder<Instance>*>(instance);
  try {
    Request wrapped(holder->host, request);
    return holder->stage->open(wrapped);
  } catch (...) {
    return nullptr;
  }
}

template <class Instance>
int process_chunk(void* instance, void* state, cf_request* request, const char* text, size_t length,
                  int is_last, cf_stream* out, char* error, size_t size) {
  auto* holder = static_cast<Holder<Instance>*>(instance);
  return guarded(
      [&] {
        Request wrapped(holder->host, request);
        Output output(holder->host, out);
        holder->stage->chunk(wrapped, std::string_view(text, length), is_last != 0, output, state);
        return 0;
      },
      error, size);
}

template <class Instance>
void close_stream(void* instance, void* state) {
  auto* holder = static_cast<Holder<Instance>*>(instance);
  try {
    holder->stage->delete_state(state);
  } catch (...) {
  }
}

}  // namespace detail

template <class Instance>
constexpr cf_stage_type request_stage_type(const char* name, const char* doc, const cf_port* ports,
                                           size_t port_count, const cf_config_key* keys,
                                           size_t key_count) {
  return cf_stage_type{name,
                       CF_STAGE_REQUEST,
                       doc,
                       ports,
                       port_count,
                       keys,
                       key_count,
                       &detail::create<Instance>,
                       &detail::destroy<Instance>,
                       &detail::process_request<Instance>,
                       nullptr,
                       nullptr,
                       nullptr};
}

template <class Instance>
constexpr cf_stage_type stream_stage_type(const char* name, const char* doc,
                                          const cf_config_key* keys, size_t key_count) {
  return cf_stage_type{name,
                       CF_STAGE_STREAM,
                       doc,
                       nullptr,
                       0,
                       keys,
                       key_count,
                       &detail::create<Instance>,
                       &detail::destroy<Instance>,
                       nullptr,
                       &detail::open_stream<Instance>,
                       &detail::process_chunk<Instance>,
                       &detail::close_stream<Instance>};
}

// ABI 1.1: a tool type. `call` returns the result text; a Failure tells the model the call
// failed with its message, any other exception is a crash (also reported to the model as a
// failure, and logged).
struct ToolCall {
  std::string_view arguments;  // a JSON object's text, valid against the tool's parameters
  std::string tenant;
  std::string user;
  std::string request_id;
  double seconds_left = 0;  // until the agent loop's deadline
};

class Tool {
 public:
  virtual ~Tool() = default;
  // May run concurrently for different requests.
  virtual std::string call(const ToolCall& call) = 0;
};

namespace detail {

template <class Instance>
int call_tool(void* instance, const cf_tool_call* call, cf_tool_result* result, char* error,
              size_t size) {
  auto* holder = static_cast<Holder<Instance>*>(instance);
  return guarded(
      [&] {
        ToolCall wrapped{std::string_view(call->arguments, call->arguments_length), call->tenant,
                         call->user, call->request_id, call->seconds_left};
        std::string text = holder->stage->call(wrapped);
        holder->host->tool_result_append(result, text.data(), text.size());
        return 0;
      },
      error, size);
}

}  // namespace detail

template <class Instance>
constexpr cf_tool_type tool_type(const char* name, const char* doc, const cf_config_key* keys,
                                 size_t key_count) {
  return cf_tool_type{name,
                      doc,
                      keys,
                      key_count,
                      &detail::create<Instance>,
                      &detail::destroy<Instance>,
                      &detail::call_tool<Instance>};
}

}  // namespace chatflow_plugin

// The entry point: a descriptor of this SDK's ABI naming the plugin's types.
#define CHATFLOW_PLUGIN_DESCRIPTOR_(name, version, license, description, types, type_count,   \
                                    tools, tool_count)                                      \
  extern "C" __attribute__((visibility("default"))) const cf_plugin_descriptor*             \
  chatflow_plugin_descriptor(void) {                                                        \
    static const cf_plugin_descriptor descriptor = {                                        \
        CHATFLOW_PLUGIN_ABI_MAJOR, CHATFLOW_PLUGIN_ABI_MINOR, name, version, license,       \
        description, types, type_count, tools, tool_count};                                 \
    return &descriptor;                                                                     \
  }

// Defines the entry point for the stage types in the array `types`.
#define CHATFLOW_PLUGIN(name, version, license, description, types)                  \
  CHATFLOW_PLUGIN_DESCRIPTOR_(name, version, license, description, types,            \
                              sizeof(types) / sizeof(types[0]), nullptr, 0)

// Defines the entry point of a plugin that provides only the tool types in the array `tools`.
#define CHATFLOW_TOOL_PLUGIN(name, version, license, description, tools)             \
  CHATFLOW_PLUGIN_DESCRIPTOR_(name, version, license, description, nullptr, 0, tools, \
                              sizeof(tools) / sizeof(tools[0]))

#endif  // CHATFLOW_PLUGIN_HPP
