// chatflow serve: the OpenAI-compatible HTTP server over one pipeline.
#include <iostream>
#include <thread>
#include <unistd.h>

#include "framework/cli/commands.h"
#include "framework/runtime/pipeline.h"
#include "framework/api/served_model.h"
#include "framework/server/http_server.h"
#include "framework/api/capabilities.h"

namespace chatflow::cli {
namespace {

std::string url_host(const std::string& host) {
  if (host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "[::1]";
  if (host.find(':') != std::string::npos) return "[" + host + "]";
  return host;
}

}  // namespace

int serve_command(const ServeOptions& options) {
  server::ServeConfig config;
  Diagnostics diagnostics;
  if (!options.pipeline.empty()) {
    config.pipeline = options.pipeline;
  } else {
    auto loaded = server::load_serve_config(options.config, diagnostics);
    if (!loaded) {
      std::cerr << diagnostics.to_string();
      return 1;
    }
    config = *loaded;
  }
  if (options.host) config.server.host = *options.host;
  if (options.port) config.server.port = *options.port;
  if (options.access_log) config.server.access_log = *options.access_log;

  server::HttpServer server(config.server);
  try {
    server.listen();
  } catch (const std::exception& error) {
    std::cerr << "chatflow: " << error.what() << "\n";
    return 1;
  }
  // Serve /health (503, loading) while the pipeline and its models load.
  std::thread io([&server] { server.run(); });
  std::cout << "chatflow: loading " << config.pipeline << std::endl;
  auto pipeline = load_pipeline(config.pipeline, builtin_registry(), diagnostics);
  if (!pipeline) {
    std::cerr << diagnostics.to_string();
    server.shutdown();
    io.join();
    return 1;
  }
  std::shared_ptr<Pipeline> shared(std::move(pipeline));
  // POST /admin/reload and SIGHUP read the same files again; server settings need a restart.
  server.set_reloader([options](const Pipeline& current, std::vector<std::string>& reused,
                                std::string& error) -> std::shared_ptr<Pipeline> {
    Diagnostics problems;
    std::string pipeline_file = options.pipeline;
    if (pipeline_file.empty()) {
      auto reread = server::load_serve_config(options.config, problems);
      if (!reread) {
        error = problems.to_string();
        return nullptr;
      }
      pipeline_file = reread->pipeline;
    }
    auto rebuilt = load_pipeline(pipeline_file, builtin_registry(), problems, &current, &reused);
    if (!rebuilt) {
      error = problems.to_string();
      return nullptr;
    }
    return std::shared_ptr<Pipeline>(std::move(rebuilt));
  });
  server.serve(shared);
  std::string model = shared->spec().name;
  for (const auto& resource : shared->spec().resources) {
    if (auto served = std::dynamic_pointer_cast<ServedModel>(shared->resource(resource.name))) {
      model = served->model_id();
      break;
    }
  }
  std::string base = "http://" + url_host(config.server.host) + ":" + std::to_string(server.port());
  std::string credentials;
  std::string key_hint;
  if (const auto* authenticator = shared->find<Authenticator>()) {
    if (auto key = authenticator->new_development_key()) {
      credentials = " -H 'Authorization: Bearer " + *key + "'";
    } else {
      credentials = " -H \"Authorization: Bearer $CHATFLOW_API_KEY\"";
      key_hint = "  keys: chatflow keys add --tenant NAME --keys-file FILE (prints a new key)\n";
    }
  }
  std::cout << "chatflow: serving pipeline '" << shared->spec().name << "' (model " << model
            << ") at " << base << "/v1\n"
            << "  try:  curl -N " << base << "/v1/chat/completions" << credentials
            << " -H 'Content-Type: application/json' -d '{\"model\": \"" << model
            << "\", \"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story\"}], "
               "\"max_tokens\": 64, \"stream\": true}'\n"
            << key_hint << "  reload: kill -HUP " << ::getpid()
            << " or POST /admin/reload (the old pipeline serves until the new one is built)\n"
            << "  stop: Ctrl-C (in-flight requests finish first)" << std::endl;
  io.join();
  shared.reset();
  std::cout << "chatflow: stopped" << std::endl;
  return 0;
}

}  // namespace chatflow::cli
