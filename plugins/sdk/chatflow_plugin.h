/* chatflow plugin SDK: the C ABI between chatflow and a stage type in a shared library.
 *
 * A plugin exports one function, `chatflow_plugin_descriptor`, returning a static descriptor:
 * the ABI version it was built against, its name, version and licence, the stage types it
 * provides (ports, configuration keys, and the functions of their lifecycle) and, since ABI 1.1,
 * its tool types (executors an agent stage's tools run through). Only C types
 * cross the boundary: no C++ objects, no exceptions (catch them in the plugin; see
 * chatflow_plugin.hpp, which does), no allocations freed on the other side.
 *
 * Versioning: a plugin loads when its ABI major equals chatflow's and its minor is not newer.
 * Minor versions only add: new host functions at the end of cf_host_api (check `size`), new
 * optional fields at the end of the structs.
 *
 * Threads: a stage instance is shared by every request in flight; process_request may run
 * concurrently for different requests. process_chunk runs in order, never concurrently, for
 * one request. A stage that crashes (a segmentation fault) takes the server with it: the host
 * can only isolate errors the plugin reports.
 */
#ifndef CHATFLOW_PLUGIN_H
#define CHATFLOW_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHATFLOW_PLUGIN_ABI_MAJOR 1
#define CHATFLOW_PLUGIN_ABI_MINOR 1

/* The symbol chatflow looks up, and its type. */
#define CHATFLOW_PLUGIN_ENTRY_SYMBOL "chatflow_plugin_descriptor"

typedef struct cf_request cf_request; /* one request, owned by the host */
typedef struct cf_stream cf_stream;   /* where a stream stage emits text */
typedef struct cf_config cf_config;   /* a stage's configuration, checked by the host */
typedef struct cf_tool_result cf_tool_result; /* where a tool call writes its result (1.1) */

typedef enum { CF_STAGE_REQUEST = 0, CF_STAGE_STREAM = 1 } cf_stage_kind;

typedef enum {
  CF_VALUE_STRING = 0,
  CF_VALUE_INTEGER = 1,
  CF_VALUE_NUMBER = 2,
  CF_VALUE_BOOLEAN = 3,
  CF_VALUE_STRING_LIST = 4
} cf_value_type;

/* One configuration key; the host checks YAML against these (types, required keys, unknown
 * keys with a suggestion) before `create` is called. */
typedef struct cf_config_key {
  const char* name;
  cf_value_type type;
  const char* default_value; /* as YAML would write it; NULL when required */
  int required;
  const char* doc; /* one line */
} cf_config_key;

/* A request stage's ports: requests leave through one of them. A stream stage has exactly one,
 * named "out". */
typedef struct cf_port {
  const char* name;
  const char* doc;
} cf_port;

/* What the host offers a plugin; valid from `create` until `destroy`. Strings returned are
 * valid until the callback returns (or, for config, while the instance lives). */
typedef struct cf_host_api {
  uint32_t size; /* sizeof(cf_host_api) of the host: newer minors append fields */
  uint32_t abi_minor;

  /* Configuration, with defaults applied. */
  const char* (*config_string)(const cf_config* config, const char* key);
  int64_t (*config_integer)(const cf_config* config, const char* key);
  double (*config_number)(const cf_config* config, const char* key);
  int (*config_boolean)(const cf_config* config, const char* key);
  size_t (*config_list_size)(const cf_config* config, const char* key);
  const char* (*config_list_item)(const cf_config* config, const char* key, size_t index);

  /* The request. Messages: role "system", "user" or "assistant"; a completion request has no
   * messages and a prompt. */
  size_t (*message_count)(const cf_request* request);
  const char* (*message_role)(const cf_request* request, size_t index);
  const char* (*message_content)(const cf_request* request, size_t index);
  void (*set_message_content)(cf_request* request, size_t index, const char* content);
  const char* (*prompt)(const cf_request* request);
  const char* (*tenant)(const cf_request* request);
  const char* (*user)(const cf_request* request);
  const char* (*model)(const cf_request* request);
  /* A note for later stages, metrics and the access log. */
  void (*annotate)(cf_request* request, const char* key, const char* value);
  /* A header of the HTTP response. */
  void (*set_response_header)(cf_request* request, const char* name, const char* value);

  /* Stream stages: pass text on (any number of times per chunk). */
  void (*emit)(cf_stream* stream, const char* text, size_t length);

  /* Logging: level 0 info, 1 warning, 2 error. */
  void (*log)(int level, const char* message);

  /* ABI 1.1. Tool calls: append text to the call's result (any number of times). */
  void (*tool_result_append)(cf_tool_result* result, const char* text, size_t length);
} cf_host_api;

/* Results of process_request and process_chunk. */
#define CF_FAIL (-1) /* the request fails: 400 with `error` as the message (500 with CF_CRASH) */
#define CF_CRASH (-2)

typedef struct cf_stage_type {
  const char* type_name; /* the `type:` in YAML; must not clash with another type */
  cf_stage_kind kind;
  const char* doc;
  const cf_port* ports;
  size_t port_count;
  const cf_config_key* config_keys;
  size_t config_key_count;

  /* An instance for one stage in one pipeline, or NULL with a message in `error`. */
  void* (*create)(const cf_host_api* host, const cf_config* config, char* error, size_t error_size);
  void (*destroy)(void* instance);

  /* Request stages: the port (0-based) the request leaves through, or CF_FAIL / CF_CRASH. */
  int (*process_request)(void* instance, cf_request* request, char* error, size_t error_size);

  /* Stream stages: per-request state (may be NULL), each chunk's text in order (`is_last` on
   * the last, whose text may be empty: flush what is held back), and the end of the request
   * whatever happened. Return 0, or CF_FAIL / CF_CRASH. */
  void* (*open_stream)(void* instance, cf_request* request);
  int (*process_chunk)(void* instance, void* state, cf_request* request, const char* text,
                       size_t length, int is_last, cf_stream* out, char* error, size_t error_size);
  void (*close_stream)(void* instance, void* state);
} cf_stage_type;

/* ABI 1.1: one call of a tool, as an agent stage makes it. */
typedef struct cf_tool_call {
  const char* arguments; /* a JSON object's text, valid against the tool's parameters */
  size_t arguments_length;
  const char* tenant;     /* the caller */
  const char* user;
  const char* request_id;
  double seconds_left;    /* until the agent loop's deadline: return before it */
} cf_tool_call;

/* ABI 1.1: a tool type, declared under `resources:` (`{type: TYPE_NAME, ...its keys}`) and used
 * by an agent's tool with `resource: NAME`. */
typedef struct cf_tool_type {
  const char* type_name; /* must not clash with another resource type */
  const char* doc;
  const cf_config_key* config_keys;
  size_t config_key_count;

  /* An instance for one resource, or NULL with a message in `error`. */
  void* (*create)(const cf_host_api* host, const cf_config* config, char* error, size_t error_size);
  void (*destroy)(void* instance);

  /* Runs one call; may run concurrently for different requests. Write the result with
   * host->tool_result_append and return 0; or return CF_FAIL with `error` (the model is told the
   * call failed, with that message) or CF_CRASH. */
  int (*call)(void* instance, const cf_tool_call* call, cf_tool_result* result, char* error,
              size_t error_size);
} cf_tool_type;

typedef struct cf_plugin_descriptor {
  uint32_t abi_major; /* CHATFLOW_PLUGIN_ABI_MAJOR when built */
  uint32_t abi_minor; /* CHATFLOW_PLUGIN_ABI_MINOR when built */
  const char* name;
  const char* version;
  const char* license;
  const char* description;
  const cf_stage_type* stage_types;
  size_t stage_type_count;
  /* ABI 1.1 (read only from plugins built for 1.1 or later). */
  const cf_tool_type* tool_types;
  size_t tool_type_count;
} cf_plugin_descriptor;

typedef const cf_plugin_descriptor* (*cf_plugin_entry)(void);

#ifdef __cplusplus
}
#endif

#endif /* CHATFLOW_PLUGIN_H */
