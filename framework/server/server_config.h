// The serve file: the HTTP server's settings and the pipeline it serves. Every path in it (the
// pipeline, server.tls's files, server.tracing.ca_file, an access_log file, web_root) is
// relative to the serve file; load_serve_config returns them resolved.
//
//   server:
//     host: 127.0.0.1
//     port: 8000
//   pipeline: ../graphs/minimal.yaml   # relative to this file
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/api/diagnostics.h"

namespace chatflow::server {

// server.tracing: OpenTelemetry traces of every request, sent to a collector over OTLP/HTTP
// (framework/tracing/). Off when the key is absent.
struct TracingSettings {
  bool enabled = false;
  // http://host:port/v1/traces; empty in the file: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
  // OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces.
  std::string endpoint;
  std::string service_name = "chatflow";
  double sampling_ratio = 1.0;  // of new traces; a caller's traceparent decides for its own
  int64_t max_queue_spans = 4096;
  int64_t max_batch_spans = 512;
  int64_t export_interval_ms = 1000;
  int64_t timeout_ms = 2000;
  std::map<std::string, std::string> headers;  // sent with every export (a collector's key)
  std::string ca_file;  // https endpoint: PEM CAs trusted; empty: the system's trust store
};

// server.tls: HTTPS on the main address (TLS 1.2 or 1.3, ALPN http/1.1). The certificate and key
// are read again on SIGHUP and POST /admin/reload; a pair that does not load then leaves the
// old one serving. Off when the key is absent. Relative paths are relative to the serve file.
struct TlsSettings {
  bool enabled = false;
  std::string certificate_file;  // PEM: the server's certificate, then its chain
  std::string key_file;          // PEM: its private key (unencrypted)
  std::string client_ca_file;    // PEM CAs; set: every client must present a certificate they
                                 // signed (mutual TLS). Empty: no client certificate asked.
};

struct ServerSettings {
  std::string host = "127.0.0.1";
  int port = 8000;
  int io_threads = 1;
  int64_t max_body_bytes = 4 << 20;
  int64_t max_connections = 1024;
  double shutdown_timeout_s = 30;
  double request_timeout_s = 600;
  double keep_alive_timeout_s = 60;
  // From the first byte of a request to the end of its header, and for a TLS handshake.
  double header_timeout_s = 10;
  // From the end of a request's header to the end of its body.
  double body_timeout_s = 60;
  // The share of max_connections that requests without credentials (public paths such as
  // /health) may hold while their body is read or they are answered, when the pipeline
  // authenticates: the rest stays open to authenticated clients.
  double anonymous_connection_share = 0.5;
  // A stream that has sent nothing for this long gets an SSE comment (": keep-alive"), so idle
  // proxies do not cut it while the request waits or prefills; 0: never.
  int64_t sse_heartbeat_ms = 10000;
  // A client that reads a stream this far behind (bytes waiting in the server) has its request
  // cancelled (503 slow_client) and its connection closed.
  int64_t max_stream_backlog_bytes = 64 << 20;
  // Seconds a client is told to wait (Retry-After) when the admission limit is reached.
  int retry_after_s = 1;
  // Where the JSON access log goes: stderr, stdout, off, or a file path.
  std::string access_log = "stderr";
  // A second address ("127.0.0.1:9100") serving only /metrics and /health, without
  // credentials, for a Prometheus that should not hold an admin key; empty: none. On the main
  // address /metrics needs an admin key when the pipeline authenticates.
  std::string metrics_listen;
  // Origins (scheme://host[:port]) whose browser pages may call the API; "*" for any. Empty:
  // none, no CORS headers (the chat page is served from the same origin).
  std::vector<std::string> cors_origins;
  // The built chat page and dashboard (web/build.mjs --out); empty: `web` beside the executable.
  std::string web_root;
  // Peers (CIDRs or addresses) whose X-Forwarded-For and X-Forwarded-Proto are believed: a
  // proxy such as nginx in front of the server. Empty: the TCP peer is the client.
  std::vector<std::string> trusted_proxies;
  TracingSettings tracing;
  TlsSettings tls;
};

// Problems with `settings` that the schema cannot see (a trusted proxy that is no CIDR), as
// (key, message); empty when there are none.
std::vector<std::pair<std::string, std::string>> settings_problems(const ServerSettings& settings);

// One entry of the serve file's `models:`: a model clients name in a request's `model`, served
// by a pipeline of its own that is built on first use (model_router.h).
struct ModelEntry {
  std::string name;
  std::vector<std::string> aliases;  // more names the entry answers to
  // The pipeline file, resolved; empty in the file: the serve file's `pipeline`.
  std::string pipeline;
  // A model file, resolved: ${CHATFLOW_MODEL} while the entry's pipeline file is read.
  std::string model;
  // More ${VAR} values for its pipeline file (before the environment).
  std::map<std::string, std::string> variables;
  // Requests in its pipeline at most (more get 503); 0: the pipeline file's max_in_flight.
  int64_t max_in_flight = 0;
  // Unloaded once no request has used it for this long; 0: only to make room.
  double ttl_s = 0;
  SourceLocation where;  // the entry in the serve file
};

struct ModelsSettings {
  std::vector<ModelEntry> entries;  // empty: one pipeline serves every request, as before
  int64_t max_loaded = 0;           // models_max: loaded models at most; 0: no limit
  int64_t memory_budget_mib = 0;    // models_memory_mib: their engines' memory at most; 0: none
  int64_t max_waiters = 64;         // models_max_waiters: requests waiting for one model's load
  double load_timeout_s = 120;      // models_load_timeout_s: how long a request waits for it
};

struct ServeConfig {
  ServerSettings server;
  std::string pipeline;  // resolved against the serve file's directory
  ModelsSettings models;
};

// Reads and checks a serve file; every problem is reported at its file:line:column.
std::optional<ServeConfig> load_serve_config(const std::string& path, Diagnostics& diagnostics);

}  // namespace chatflow::server
