#include "framework/server/server_config.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "framework/api/config_schema.h"
#include "framework/api/config_value.h"
#include "framework/net/tls_client.h"
#include "framework/server/forwarded.h"
#include "framework/text/yaml_reader.h"
#include "framework/tools/http_post.h"

namespace chatflow::server {

namespace {

// The endpoint (from the file or OpenTelemetry's environment variables) is an http:// URL, and
// a batch fits in the queue; marks tracing enabled. Errors at the key's file:line:column.
bool check_tracing(TracingSettings& tracing, const ConfigValue& value, Diagnostics& diagnostics) {
  const ConfigValue* endpoint_value = value.find("endpoint");
  std::string source = "server.tracing.endpoint";
  if (tracing.endpoint.empty()) {
    if (const char* traces = std::getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); traces && *traces) {
      tracing.endpoint = traces;
      source = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
    } else if (const char* base = std::getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); base && *base) {
      std::string url = base;
      while (!url.empty() && url.back() == '/')
        url.pop_back();
      tracing.endpoint = url + "/v1/traces";
      source = "OTEL_EXPORTER_OTLP_ENDPOINT";
    } else {
      diagnostics.error(value.where,
                        "server.tracing needs an 'endpoint' (the collector's OTLP/HTTP traces URL, "
                        "e.g. http://127.0.0.1:4318/v1/traces), or "
                        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT set");
      return false;
    }
  }
  std::string error;
  auto endpoint = tools::parse_http_url(tracing.endpoint, error);
  if (!endpoint) {
    diagnostics.error(
        endpoint_value ? endpoint_value->where : value.where,
        source + " must be the http:// or https:// URL of an OTLP/HTTP collector: " + error);
    return false;
  }
  if (const ConfigValue* ca_file = value.find("ca_file")) {
    if (!endpoint->tls) {
      diagnostics.error(ca_file->where, "server.tracing.ca_file is set, but " + source +
                                            " is not https://: spans would go unencrypted");
      return false;
    }
    try {
      net::TlsClientOptions options;
      options.ca_file = tracing.ca_file;
      [[maybe_unused]] net::TlsClientContext loads(options);
    } catch (const net::TlsError& failure) {
      diagnostics.error(ca_file->where, "server.tracing." + std::string(failure.what()));
      return false;
    }
  }
  if (tracing.max_batch_spans > tracing.max_queue_spans) {
    const ConfigValue* batch = value.find("max_batch_spans");
    diagnostics.error(batch ? batch->where : value.where,
                      "server.tracing.max_batch_spans (" + std::to_string(tracing.max_batch_spans) +
                          ") must not exceed max_queue_spans (" +
                          std::to_string(tracing.max_queue_spans) + ")");
    return false;
  }
  tracing.enabled = true;
  return true;
}

// `file` as the serve file at `serve_file` names it: relative to the serve file's folder. Empty
// stays empty (each key's default).
std::string beside(const std::string& serve_file, const std::string& file) {
  if (file.empty() || std::filesystem::path(file).is_absolute()) return file;
  return (std::filesystem::path(serve_file).parent_path() / file).lexically_normal().string();
}

// Every path key of the server block, read relative to the serve file, so the file means the
// same wherever chatflow is started. The access log's stream names are no paths.
void resolve_paths_beside(const std::string& serve_file, ServerSettings& server) {
  for (std::string* file : {&server.tls.certificate_file, &server.tls.key_file,
                            &server.tls.client_ca_file, &server.tracing.ca_file, &server.web_root})
    *file = beside(serve_file, *file);
  if (server.access_log != "stderr" && server.access_log != "stdout" && server.access_log != "off")
    server.access_log = beside(serve_file, server.access_log);
}

// One entry of `models:`.
SchemaBuilder<ModelEntry> model_entry_schema() {
  SchemaBuilder<ModelEntry> model;
  model.key("name", &ModelEntry::name, "the name a request's `model` gives").required();
  model.key("aliases", &ModelEntry::aliases, "more names the model answers to");
  model.key("pipeline", &ModelEntry::pipeline,
            "its pipeline YAML file, relative to this file; empty: the serve file's pipeline");
  model.key("model", &ModelEntry::model,
            "a model file, relative to this file: ${CHATFLOW_MODEL} in its pipeline file");
  model.key("variables", &ModelEntry::variables,
            "more ${VAR} values for its pipeline file, taken before the environment");
  model
      .key("max_in_flight", &ModelEntry::max_in_flight,
           "requests in its pipeline at most (more get 503); 0: the pipeline's own")
      .range(0, 1'000'000);
  model
      .key("ttl_s", &ModelEntry::ttl_s,
           "unloaded once no request has used it for this long; 0: only to make room")
      .range(0, 365.0 * 86400);
  return model;
}

// The `models:` entries: names and aliases unique, files there (resolved beside the serve file),
// ${VAR} names well formed. Each problem at its key's file:line:column.
bool check_models(const std::string& serve_file, const ConfigValue& root, ServeConfig& config,
                  Diagnostics& diagnostics) {
  const ConfigValue* list = root.find("models");
  std::map<std::string, std::string> taken;  // name or alias -> the key that took it
  for (size_t i = 0; i < config.models.entries.size(); ++i) {
    ModelEntry& entry = config.models.entries[i];
    const ConfigValue& item = list->items[i];
    std::string key = "models[" + std::to_string(i) + "]";
    entry.where = item.where;
    auto where_of = [&](const std::string& name) {
      const ConfigValue* value = item.find(name);
      return value ? value->where : item.where;
    };
    auto claim = [&](const std::string& name, const std::string& at, SourceLocation where) {
      if (name.empty()) {
        diagnostics.error(where, at + " must not be empty");
        return;
      }
      auto [held, fresh] = taken.emplace(name, at);
      if (!fresh) {
        diagnostics.error(where, at + ": the name '" + name + "' is already taken by " +
                                     held->second + "; every name and alias must be unique");
      }
    };
    claim(entry.name, key + ".name", where_of("name"));
    for (size_t a = 0; a < entry.aliases.size(); ++a) {
      const ConfigValue* aliases = item.find("aliases");
      SourceLocation where =
          aliases && a < aliases->items.size() ? aliases->items[a].where : where_of("aliases");
      claim(entry.aliases[a], key + ".aliases[" + std::to_string(a) + "]", where);
    }
    entry.pipeline = entry.pipeline.empty() ? config.pipeline : beside(serve_file, entry.pipeline);
    std::error_code error;
    if (!std::filesystem::is_regular_file(entry.pipeline, error)) {
      diagnostics.error(where_of("pipeline"), key + ".pipeline: the pipeline file '" +
                                                  entry.pipeline +
                                                  "' does not exist (paths are relative to the "
                                                  "serve file)");
    }
    if (!entry.model.empty()) {
      entry.model = beside(serve_file, entry.model);
      if (!std::filesystem::exists(entry.model, error)) {
        diagnostics.error(where_of("model"), key + ".model: the model file '" + entry.model +
                                                 "' does not exist (paths are relative to the "
                                                 "serve file)");
      }
      if (entry.variables.count("CHATFLOW_MODEL")) {
        diagnostics.error(where_of("variables"),
                          key +
                              ".variables sets CHATFLOW_MODEL, which `model` sets too: keep "
                              "one of them");
      }
      entry.variables["CHATFLOW_MODEL"] = entry.model;
    }
    for (const auto& [name, value] : entry.variables) {
      bool word = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
      for (char c : name)
        word = word && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      if (!word) {
        diagnostics.error(where_of("variables"), key + ".variables: '" + name +
                                                     "' is not a variable name (letters, "
                                                     "digits and _, not starting with a digit)");
      }
    }
  }
  for (const char* limit : {"models_max", "models_memory_mib"}) {
    const ConfigValue* value = root.find(limit);
    if (value && config.models.entries.empty()) {
      diagnostics.error(value->where, std::string(limit) +
                                          " is set but there is no 'models:' list for it to "
                                          "limit");
    }
  }
  return diagnostics.empty();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> settings_problems(const ServerSettings& settings) {
  std::vector<std::pair<std::string, std::string>> problems;
  std::string error;
  if (!TrustedProxies::parse(settings.trusted_proxies, error))
    problems.emplace_back("trusted_proxies", error);
  return problems;
}

std::optional<ServeConfig> load_serve_config(const std::string& path, Diagnostics& diagnostics) {
  ConfigValue root = read_yaml_file(path, diagnostics);
  if (!diagnostics.empty()) return std::nullopt;

  SchemaBuilder<ServerSettings> server;
  server.key("host", &ServerSettings::host, "address to listen on");
  server.key("port", &ServerSettings::port, "TCP port; 0 picks a free one").range(0, 65535);
  server.key("io_threads", &ServerSettings::io_threads, "threads serving connections")
      .range(1, 256);
  server.key("max_body_bytes", &ServerSettings::max_body_bytes, "larger bodies get 413")
      .range(1024, int64_t{1} << 32);
  server.key("max_connections", &ServerSettings::max_connections, "open connections at most")
      .range(1, 1'000'000);
  server
      .key("shutdown_timeout_s", &ServerSettings::shutdown_timeout_s,
           "on SIGTERM, how long in-flight requests may finish before they are cancelled")
      .range(0, 86400);
  server
      .key("request_timeout_s", &ServerSettings::request_timeout_s,
           "a request still running after this long is cancelled (504); 0: no limit")
      .range(0, 86400);
  server
      .key("keep_alive_timeout_s", &ServerSettings::keep_alive_timeout_s,
           "an idle connection is closed after this long")
      .range(0.1, 86400);
  server
      .key("retry_after_s", &ServerSettings::retry_after_s,
           "Retry-After seconds sent with 503 when the pipeline is full")
      .range(0, 3600);
  server.key("access_log", &ServerSettings::access_log,
             "JSON access log: stderr, stdout, off, or a file path (relative to this file)");
  server.key("metrics_listen", &ServerSettings::metrics_listen,
             "host:port serving only /metrics and /health without credentials; empty: none");
  server.key("cors_origins", &ServerSettings::cors_origins,
             "origins whose browser pages may call the API (\"*\": any); empty: none");
  server.key("web_root", &ServerSettings::web_root,
             "folder of the built chat page and dashboard, relative to this file; empty: 'web' "
             "beside the executable");
  server.key("trusted_proxies", &ServerSettings::trusted_proxies,
             "CIDRs of proxies whose X-Forwarded-For/-Proto are believed (e.g. 127.0.0.1/32)");
  server
      .key("header_timeout_s", &ServerSettings::header_timeout_s,
           "from a request's first byte to the end of its header (and a TLS handshake); "
           "slower: closed")
      .range(0.1, 3600);
  server
      .key("body_timeout_s", &ServerSettings::body_timeout_s,
           "from the end of a request's header to the end of its body; slower: closed")
      .range(0.1, 86400);
  server
      .key("anonymous_connection_share", &ServerSettings::anonymous_connection_share,
           "share of max_connections that requests without credentials (public paths) may hold "
           "while their body is read, when the pipeline authenticates")
      .range(0.01, 1);
  server
      .key("sse_heartbeat_ms", &ServerSettings::sse_heartbeat_ms,
           "a stream silent this long gets an SSE comment (': keep-alive'); 0: never")
      .range(0, 3'600'000);
  server
      .key("max_stream_backlog_bytes", &ServerSettings::max_stream_backlog_bytes,
           "a client this many bytes behind a stream is cancelled (503 slow_client) and closed")
      .range(64 * 1024, int64_t{1} << 34);

  SchemaBuilder<TlsSettings> tls;
  tls.key("certificate_file", &TlsSettings::certificate_file,
          "PEM file: the server's certificate, then its chain")
      .required();
  tls.key("key_file", &TlsSettings::key_file, "PEM file: the certificate's private key").required();
  tls.key("client_ca_file", &TlsSettings::client_ca_file,
          "PEM CAs: set, every client must present a certificate one of them signed");
  server.object("tls", &ServerSettings::tls, tls,
                "HTTPS on the main address (TLS 1.2+, ALPN http/1.1); off when absent");

  SchemaBuilder<TracingSettings> tracing;
  tracing.key("endpoint", &TracingSettings::endpoint,
              "OTLP/HTTP traces URL (http:// or https://host:port/v1/traces); empty: "
              "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT");
  tracing.key("service_name", &TracingSettings::service_name, "the resource's service.name");
  tracing
      .key("sampling_ratio", &TracingSettings::sampling_ratio,
           "share of new traces recorded; an incoming traceparent's sampled flag decides its own")
      .range(0, 1);
  tracing
      .key("max_queue_spans", &TracingSettings::max_queue_spans,
           "spans waiting for export at most; past it a request's spans are dropped and counted")
      .range(1, 10'000'000);
  tracing.key("max_batch_spans", &TracingSettings::max_batch_spans, "spans per export at most")
      .range(1, 1'000'000);
  tracing
      .key("export_interval_ms", &TracingSettings::export_interval_ms,
           "how long spans wait for a full batch before they are sent anyway")
      .range(1, 3'600'000);
  tracing
      .key("timeout_ms", &TracingSettings::timeout_ms,
           "one export's whole exchange; also how long shutdown may spend flushing")
      .range(1, 600'000);
  tracing.key("headers", &TracingSettings::headers,
              "HTTP header fields sent with every export (e.g. a collector's API key)");
  tracing.key("ca_file", &TracingSettings::ca_file,
              "https endpoint: PEM file of the CAs trusted (relative to this file); empty: the "
              "system's trust store");
  server.object("tracing", &ServerSettings::tracing, tracing,
                "OpenTelemetry traces over OTLP/HTTP; off when absent");

  SchemaBuilder<ModelEntry> model = model_entry_schema();

  struct ServeFile {
    ServerSettings server;
    std::string pipeline;
    std::vector<ModelEntry> models;
    int64_t models_max = 0;
    int64_t models_memory_mib = 0;
    int64_t models_max_waiters = 64;
    double models_load_timeout_s = 120;
  };
  SchemaBuilder<ServeFile> file;
  file.object("server", &ServeFile::server, server, "the HTTP server");
  file.key("pipeline", &ServeFile::pipeline, "the pipeline YAML file, relative to this file")
      .required();
  file.list("models", &ServeFile::models, model,
            "more models, each behind its own pipeline, picked by a request's `model` and "
            "loaded on first use");
  file.key("models_max", &ServeFile::models_max,
           "models: entries loaded at once at most (the least recently used idle one is "
           "unloaded); 0: no limit")
      .range(0, 10'000);
  file.key("models_memory_mib", &ServeFile::models_memory_mib,
           "models: entries' engine memory (weights and KV pool) at most, in MiB; 0: no limit")
      .range(0, int64_t{1} << 30);
  file.key("models_max_waiters", &ServeFile::models_max_waiters,
           "requests that may wait for one model to load; more get 503")
      .range(1, 1'000'000);
  file.key("models_load_timeout_s", &ServeFile::models_load_timeout_s,
           "how long a request waits for its model to load before a 503")
      .range(0.1, 86400);

  ParseContext context{diagnostics, "serve file '" + path + "'", nullptr, ""};
  if (!root.is_mapping()) {
    diagnostics.error(
        root.where.line > 0 ? root.where : SourceLocation{path, 1, 1},
        "a serve file must be a mapping with 'server' and 'pipeline', got " + root.describe());
    return std::nullopt;
  }
  auto parsed = std::static_pointer_cast<ServeFile>(
      file.schema()->parse(&root, SourceLocation{path, 1, 1}, context));
  if (!diagnostics.empty()) return std::nullopt;

  for (const auto& [key, message] : settings_problems(parsed->server)) {
    const ConfigValue* server_value = root.find("server");
    const ConfigValue* value = server_value ? server_value->find(key) : nullptr;
    diagnostics.error(value ? value->where : SourceLocation{path, 1, 1},
                      "server." + key + ": " + message);
  }
  if (!diagnostics.empty()) return std::nullopt;

  ServeConfig config;
  config.server = parsed->server;
  resolve_paths_beside(path, config.server);
  config.pipeline = beside(path, parsed->pipeline);
  config.models.entries = parsed->models;
  config.models.max_loaded = parsed->models_max;
  config.models.memory_budget_mib = parsed->models_memory_mib;
  config.models.max_waiters = parsed->models_max_waiters;
  config.models.load_timeout_s = parsed->models_load_timeout_s;
  if (!check_models(path, root, config, diagnostics)) return std::nullopt;
  const ConfigValue* server_value = root.find("server");
  // The TLS files are read when the server starts (and again on reload), not here.
  if (server_value && server_value->find("tls")) config.server.tls.enabled = true;
  if (const ConfigValue* tracing_value = server_value ? server_value->find("tracing") : nullptr) {
    if (!check_tracing(config.server.tracing, *tracing_value, diagnostics)) return std::nullopt;
  }
  std::error_code error;
  if (!std::filesystem::is_regular_file(config.pipeline, error)) {
    diagnostics.error(root.find("pipeline")->where, "pipeline file '" + config.pipeline +
                                                        "' does not exist (paths are relative "
                                                        "to the serve file)");
    return std::nullopt;
  }
  return config;
}

}  // namespace chatflow::server
