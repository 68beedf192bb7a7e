// chatflow serve: the OpenAI-compatible HTTP server over one pipeline.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "framework/api/capabilities.h"
#include "framework/api/served_model.h"
#include "framework/cli/command.h"
#include "framework/runtime/pipeline.h"
#include "framework/server/http_server.h"
#include "framework/text/variable_overrides.h"

namespace chatflow::cli {
namespace {

struct ServeOptions {
  std::string config = "configs/default.yaml";
  std::string pipeline;  // set: serve this pipeline with default server settings
  std::optional<std::string> host;
  std::optional<int> port;
  std::optional<std::string> access_log;
  std::vector<std::string> trusted_proxies;  // empty: the file's
};

std::string url_host(const std::string& host) {
  if (host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "[::1]";
  if (host.find(':') != std::string::npos) return "[" + host + "]";
  return host;
}

// POST /admin/reload and SIGHUP read the same files again; server settings need a restart.
server::HttpServer::Reloader make_reloader(const ServeOptions& options) {
  return [options](const Pipeline& current, std::vector<std::string>& reused,
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
  };
}

// A `models:` entry's pipeline: its file read with the entry's ${VAR}s, named after the entry
// (its metrics' pipeline label), with the entry's max_in_flight. Throws with every problem.
std::shared_ptr<Pipeline> build_model_pipeline(const server::ModelEntry& entry) {
  Diagnostics problems;
  ScopedVariables variables(entry.variables);
  auto spec = load_pipeline_spec(entry.pipeline, builtin_registry(), problems);
  if (!spec) throw std::runtime_error(problems.to_string());
  spec->name = entry.name;
  if (entry.max_in_flight > 0) spec->max_in_flight = static_cast<size_t>(entry.max_in_flight);
  auto pipeline = Pipeline::build(std::move(*spec), problems);
  if (!pipeline) throw std::runtime_error(problems.to_string());
  return std::shared_ptr<Pipeline>(std::move(pipeline));
}

// The `models:` entries, for the banner.
std::string models_text(const server::ModelsSettings& models) {
  std::string text;
  for (const auto& entry : models.entries) {
    text += "  model: " + entry.name;
    for (const auto& alias : entry.aliases)
      text += (&alias == &entry.aliases.front() ? " (aliases: " : ", ") + alias;
    if (!entry.aliases.empty()) text += ")";
    text += " from " + entry.pipeline +
            (entry.model.empty() ? std::string() : " with " + entry.model) +
            ", loaded on first use\n";
  }
  return text;
}

// The folder GET / and /dashboard are served from, as the server resolves it (StaticFiles):
// server.web_root, or `web` beside the running executable.
std::filesystem::path web_root_of(const server::ServerSettings& settings) {
  if (!settings.web_root.empty()) return settings.web_root;
  std::error_code error;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return (error ? std::filesystem::current_path(error) : self.parent_path()) / "web";
}

// The chat page's and dashboard's full URLs, or why there are none. `sign_in` says which key
// the pages ask for (empty: a pipeline without auth).
std::string web_pages_text(const server::ServerSettings& settings, const std::string& base,
                           const std::string& sign_in) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(web_root_of(settings) / "index.html", error)) {
    return "  chat page: not built (GET / says how to build it; the API works without it)\n";
  }
  return "  chat page: " + base + "/" +
         (sign_in.empty() ? "" : "  (sign in with " + sign_in + ")") + "\n  dashboard: " + base +
         "/dashboard" + (sign_in.empty() ? "" : "  (sign in with an admin key)") + "\n";
}

// Where each model computes: "  engine: test-model on cpu (AMD EPYC 7R13 Processor (avx2, 2
// threads)); weights 1.0 MiB, KV pool up to 12.0 MiB".
std::string engines_text(const Pipeline& pipeline) {
  std::string text;
  auto mib = [](int64_t bytes) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return std::string(buffer);
  };
  for (const auto& resource : pipeline.spec().resources) {
    auto served = std::dynamic_pointer_cast<ServedModel>(pipeline.resource(resource.name));
    if (!served) continue;
    EngineStats stats = served->engine_stats();
    if (stats.backend.empty()) continue;
    text += "  engine: " + served->model_id() + " on " + stats.backend + " (" + stats.device +
            "); weights " + mib(stats.weight_bytes) + ", KV pool up to " +
            mib(stats.kv_pool_bytes) + "\n";
  }
  return text;
}

// Where the server listens, the chat page, a request to try, and how to reload and stop it.
void print_serving(const Pipeline& pipeline, const server::ServerSettings& settings, uint16_t port,
                   uint16_t metrics_port, bool tls) {
  const std::string& host = settings.host;
  std::string model = pipeline.spec().name;
  for (const auto& resource : pipeline.spec().resources) {
    if (auto served = std::dynamic_pointer_cast<ServedModel>(pipeline.resource(resource.name))) {
      model = served->model_id();
      break;
    }
  }
  std::string base = (tls ? "https://" : "http://") + url_host(host) + ":" + std::to_string(port);
  // A certificate from a private CA: curl must be told which one.
  std::string trust = tls ? " --cacert CA.pem" : "";
  std::string credentials;
  std::string key_hint;
  std::string sign_in;
  if (const auto* authenticator = pipeline.find<Authenticator>()) {
    if (auto key = authenticator->new_development_key()) {
      credentials = " -H 'Authorization: Bearer " + *key + "'";
      sign_in = "the key in the curl line below";
    } else {
      credentials = " -H \"Authorization: Bearer $CHATFLOW_API_KEY\"";
      key_hint = "  keys: chatflow keys add --tenant NAME --keys-file FILE (prints a new key)\n";
      sign_in = "an API key";
    }
  }
  std::cout << "chatflow: serving pipeline '" << pipeline.spec().name << "' (model " << model
            << ") at " << base << "/v1\n"
            << engines_text(pipeline) << web_pages_text(settings, base, sign_in)
            << "  try:  curl -N" << trust << " " << base << "/v1/chat/completions" << credentials
            << " -H 'Content-Type: application/json' -d '{\"model\": \"" << model
            << "\", \"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story\"}], "
               "\"max_tokens\": 64, \"stream\": true}'\n"
            << key_hint
            << (metrics_port
                    ? "  metrics: http://" +
                          settings.metrics_listen.substr(0, settings.metrics_listen.rfind(':')) +
                          ":" + std::to_string(metrics_port) + "/metrics (no key needed)\n"
                    : std::string())
            << "  reload: kill -HUP " << ::getpid()
            << " or POST /admin/reload (the old pipeline serves until the new one is built)\n"
            << "  stop: Ctrl-C (in-flight requests finish first)" << std::endl;
}

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
  if (!options.trusted_proxies.empty()) config.server.trusted_proxies = options.trusted_proxies;
  for (const auto& [key, message] : server::settings_problems(config.server)) {
    std::cerr << "chatflow: server." << key << ": " << message << "\n";
    return 2;
  }

  server::HttpServer server(config.server);
  server.set_models(config.models, build_model_pipeline);
  server.listen();  // a port taken or an address not ours: thrown, reported by main
  server.handle_signals();
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
  server.set_reloader(make_reloader(options));
  server.serve(shared);
  print_serving(*shared, config.server, server.port(), server.metrics_port(), server.serves_tls());
  std::cout << models_text(config.models) << std::flush;
  io.join();
  shared.reset();
  std::cout << "chatflow: stopped" << std::endl;
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<ServeOptions>();
  auto* command = app.add_subcommand(
      "serve", "Serve a pipeline over the OpenAI HTTP API (chat, completions, SSE, metrics)");
  command->add_option("--config", options->config, "serve file: server settings and the pipeline")
      ->capture_default_str();
  command->add_option("--pipeline", options->pipeline,
                      "serve this pipeline YAML with default server settings instead");
  command->add_option("--host", options->host, "address to listen on (overrides the file)");
  command->add_option("--port", options->port, "TCP port; 0 picks a free one (overrides the file)")
      ->check(CLI::Range(0, 65535));
  command->add_option("--access-log", options->access_log,
                      "JSON access log: stderr, stdout, off, or a file path");
  command
      ->add_option("--trusted-proxies", options->trusted_proxies,
                   "CIDRs whose X-Forwarded-For/-Proto are believed (overrides the file)")
      ->delimiter(',');
  command->callback(
      [&selected, options] { selected = [options] { return serve_command(*options); }; });
}

}  // namespace chatflow::cli
