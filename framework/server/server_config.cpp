#include "framework/server/server_config.h"

#include <filesystem>

#include "framework/api/config_schema.h"
#include "framework/api/config_value.h"
#include "framework/server/forwarded.h"
#include "framework/text/yaml_reader.h"

namespace chatflow::server {

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
             "JSON access log: stderr, stdout, off, or a file path");
  server.key("metrics_listen", &ServerSettings::metrics_listen,
             "host:port serving only /metrics and /health without credentials; empty: none");
  server.key("cors_origins", &ServerSettings::cors_origins,
             "origins whose browser pages may call the API (\"*\": any); empty: none");
  server.key("web_root", &ServerSettings::web_root,
             "folder of the built chat page and dashboard; empty: 'web' beside the executable");
  server.key("trusted_proxies", &ServerSettings::trusted_proxies,
             "CIDRs of proxies whose X-Forwarded-For/-Proto are believed (e.g. 127.0.0.1/32)");

  struct ServeFile {
    ServerSettings server;
    std::string pipeline;
  };
  SchemaBuilder<ServeFile> file;
  file.object("server", &ServeFile::server, server, "the HTTP server");
  file.key("pipeline", &ServeFile::pipeline, "the pipeline YAML file, relative to this file")
      .required();

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
  std::filesystem::path pipeline(parsed->pipeline);
  if (pipeline.is_relative()) pipeline = std::filesystem::path(path).parent_path() / pipeline;
  config.pipeline = pipeline.lexically_normal().string();
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
