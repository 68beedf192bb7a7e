// The OpenAI-compatible HTTP server: Boost.Beast over Asio, HTTP/1.1 keep-alive, one strand per
// connection. A chat or completion request becomes a Request submitted to the pipeline; its
// chunks come back through a sink and go out as server-sent events (or one JSON body).
//
// Routes: the table in routes.cpp.
//
// A client that goes away cancels its request through the pipeline. SIGTERM or SIGINT stops
// accepting, lets requests in flight finish for up to shutdown_timeout_s, then cancels the rest
// (streams end with an error event and [DONE]); a second signal cancels at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "framework/runtime/pipeline.h"
#include "framework/server/server_config.h"

namespace chatflow::server {

class ServerState;

class HttpServer {
 public:
  explicit HttpServer(ServerSettings settings);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens, and starts answering: until serve() every API route and /health answer
  // 503 (loading). Throws std::runtime_error when the address cannot be bound, or (naming the
  // file) when server.tls's certificate or key cannot be used.
  void listen();
  // The port actually bound (settings.port 0 picks a free one).
  uint16_t port() const;
  // The port of server.metrics_listen, or 0 when there is none.
  uint16_t metrics_port() const;
  // Whether the main address speaks HTTPS (server.tls).
  bool serves_tls() const;

  // Starts serving `pipeline`; its model resources give the model ids, tokenizer and engine
  // metrics. Call once.
  void serve(std::shared_ptr<Pipeline> pipeline);

  // Many models behind one server (the serve file's `models:`; model_router.h): `build` makes
  // an entry's pipeline when a request first names it, or throws with the reason. Call before
  // listen().
  using ModelPipelineBuilder = std::function<std::shared_ptr<Pipeline>(const ModelEntry& entry)>;
  void set_models(ModelsSettings models, ModelPipelineBuilder build);

  // Hot reload: `reloader` builds the pipeline anew from the configuration (sharing unchanged
  // resources with `current`), or returns nullptr with the errors in `error`. POST
  // /admin/reload (admins) and SIGHUP call it; on success new requests go to the new pipeline
  // while the old one finishes what it has and is then destroyed.
  using Reloader = std::function<std::shared_ptr<Pipeline>(
      const Pipeline& current, std::vector<std::string>& reused, std::string& error)>;
  void set_reloader(Reloader reloader);

  // From now on SIGTERM and SIGINT start the graceful shutdown and SIGHUP reloads, handled once
  // run() runs (a signal before that waits for it). Call before anyone may learn the server is
  // up: a signal that arrives earlier meets its default action and ends the process at once.
  void handle_signals();

  // Runs the I/O threads (the calling one among them) until a shutdown completes.
  void run();

  // Starts the graceful shutdown; safe from any thread.
  void shutdown();

 private:
  std::shared_ptr<ServerState> state_;
};

}  // namespace chatflow::server
