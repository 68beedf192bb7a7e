// HttpServer's public face: listen, serve, run, shut down. The work is done by the connections
// (connection.cpp, generation_exchange.cpp) and the server's lifecycle (lifecycle.cpp).
#include "framework/server/http_server.h"

#include "framework/server/server_state.h"

namespace chatflow::server {

HttpServer::HttpServer(ServerSettings settings)
    : state_(std::make_shared<ServerState>(std::move(settings))) {}

// Pending operations and sinks hold connections, and connections hold the state: close everything,
// then run the handlers that remain until the last connection is gone, so nothing outlives us.
HttpServer::~HttpServer() {
  net::post(state_->io, [state = state_] { state->abort_all(); });
  state_->work.reset();
  while (true) {
    state_->io.restart();
    state_->io.run_for(std::chrono::milliseconds(10));
    std::lock_guard lock(state_->mutex);
    if (state_->connections.empty() && state_->in_flight.empty() && state_->io.stopped()) break;
  }
  // An old pipeline's drain (after a reload) waits for its last requests to be released, and
  // the last reference may sit in a handler still queued here: keep running them until every
  // background task is done, or the join below would wait for ever.
  while (state_->background_running.load(std::memory_order_acquire) > 0) {
    state_->io.restart();
    state_->io.run_for(std::chrono::milliseconds(10));
  }
  state_->join_background();
}

void HttpServer::listen() {
  const ServerSettings& settings = state_->settings;
  boost::system::error_code error;
  auto address = net::ip::make_address(settings.host, error);
  if (error) {
    throw std::runtime_error("cannot listen on '" + settings.host +
                             "': not an IP address (use 127.0.0.1, 0.0.0.0 or ::)");
  }
  tcp::endpoint endpoint(address, static_cast<uint16_t>(settings.port));
  auto& acceptor = state_->acceptor;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(net::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(net::socket_base::max_listen_connections, error);
  if (error) {
    throw std::runtime_error("cannot listen on " + settings.host + ":" +
                             std::to_string(settings.port) + ": " + error.message());
  }
  // Read once here: a signal may close the acceptor (on the io thread) before anyone asks.
  state_->bound_port = acceptor.local_endpoint().port();
  state_->work.emplace(state_->io.get_executor());
  state_->accept();
}

uint16_t HttpServer::port() const {
  return state_->bound_port;
}

void HttpServer::serve(std::shared_ptr<Pipeline> pipeline) {
  state_->install(std::move(pipeline));
}

void HttpServer::set_reloader(Reloader reloader) {
  state_->reloader = std::move(reloader);
}

void HttpServer::run(bool handle_signals) {
  if (handle_signals) {
    state_->signals.emplace(state_->io, SIGINT, SIGTERM);
    state_->wait_for_signal();
    state_->hangups.emplace(state_->io, SIGHUP);
    state_->wait_for_hangup();
  }
  std::vector<std::thread> threads;
  for (int i = 1; i < state_->settings.io_threads; ++i) {
    threads.emplace_back([this] { state_->io.run(); });
  }
  state_->io.run();
  for (auto& thread : threads)
    thread.join();
}

void HttpServer::shutdown() {
  net::post(state_->io, [state = state_] { state->begin_shutdown(); });
}

}  // namespace chatflow::server
