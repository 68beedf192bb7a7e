// HttpServer's public face: listen, serve, run, shut down. The work is done by the connections
// (connection.cpp, generation_exchange.cpp) and the server's lifecycle (lifecycle.cpp).
#include "framework/server/http_server.h"

#include <algorithm>
#include <sys/resource.h>
#include <thread>

#include <spdlog/spdlog.h>

#include "framework/server/model_routing.h"
#include "framework/server/server_state.h"

namespace chatflow::server {

HttpServer::HttpServer(ServerSettings settings)
    : state_(std::make_shared<ServerState>(std::move(settings))) {}

// Pending operations and sinks hold connections, and connections hold the state: close everything,
// then run the handlers that remain until the last connection is gone, so nothing outlives us.
HttpServer::~HttpServer() {
  net::post(state_->io, [state = state_] { state->abort_all(); });
  state_->work.reset();
  auto run_a_while = [this] {
    state_->io.restart();
    try {
      state_->io.run_for(std::chrono::milliseconds(10));
    } catch (const std::exception& error) {
      spdlog::error("an I/O handler failed while the server closed: {}", error.what());
    }
  };
  while (true) {
    run_a_while();
    std::lock_guard lock(state_->mutex);
    if (state_->connections.empty() && state_->in_flight.empty() && state_->io.stopped()) break;
  }
  // An old pipeline's drain (after a reload) waits for its last requests to be released, and
  // the last reference may sit in a handler still queued here: keep running them until every
  // background task is done, or the join below would wait for ever.
  while (state_->background_running.load(std::memory_order_acquire) > 0)
    run_a_while();
  state_->join_background();
  // A request leaves in_flight when it finishes, but a stage (the engine's scheduler dropping a
  // cancelled sequence) may hold it a while longer, and its sink writes the metrics, access log
  // and spans only on release: those live in this state, so wait until the served pipeline, which
  // every sink holds, is let go of by all of them.
  std::vector<std::weak_ptr<const ServedPipeline>> all_served;
  {
    std::lock_guard lock(state_->mutex);
    all_served.push_back(state_->served);
    state_->served.reset();
  }
  if (state_->model_router) {
    for (const auto& status : state_->model_router->statuses())
      if (status.served) all_served.push_back(status.served);
    state_->model_router.reset();  // joins the loads in progress; lets go of the loaded models
  }
  auto any_held = [&all_served] {
    return std::any_of(all_served.begin(), all_served.end(),
                       [](const auto& served) { return !served.expired(); });
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (any_held() && std::chrono::steady_clock::now() < give_up) {
    run_a_while();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the loop may have nothing to run
  }
  if (any_held())
    spdlog::error(
        "requests were still held by stages 60 s after the server closed; closing without "
        "waiting for them");
  // A replaced pipeline let go of by then is being destroyed on the reaper's thread.
  state_->reaper->wait_until_idle();
  // Every request is released by now, its spans queued: send what fits in the export timeout.
  if (state_->tracer) state_->tracer->shutdown();
}

void HttpServer::set_models(ModelsSettings models, ModelPipelineBuilder build) {
  if (models.entries.empty()) return;
  state_->model_router = std::make_shared<ModelRouter>(
      std::move(models), [state = std::weak_ptr<ServerState>(state_),
                          build = std::move(build)](const ModelEntry& entry) {
        auto self = state.lock();
        if (!self) throw std::runtime_error("the server is gone");
        auto front = self->served_snapshot();
        return serve_model_pipeline(build(entry), entry, self->metrics, self->reaper,
                                    front && front->authenticator);
      });
}

namespace {

// Runs the I/O loop until it stops. A handler that throws unwinds out of run(): the connection
// it served goes with its state, and the loop goes on for everyone else, instead of the
// exception ending the process. Handlers catch what they expect; this is the last line.
void run_io_handlers(net::io_context& io) {
  while (true) {
    try {
      io.run();
      return;
    } catch (const std::exception& error) {
      spdlog::error("an I/O handler failed, its connection was dropped: {}", error.what());
    }
  }
}

// Descriptors the process needs besides its connections: the model file, logs, databases, the
// event loop, plugins.
constexpr int64_t kReservedDescriptors = 64;

// Raises the soft limit on open files to the hard one (1024 is a common soft default) and keeps
// max_connections below what is left after the reserve, so accept() never runs out first.
void fit_connections_to_descriptor_limit(ServerSettings& settings) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY) return;
  int64_t usable =
      std::max<int64_t>(1, static_cast<int64_t>(limit.rlim_cur) - kReservedDescriptors);
  if (settings.max_connections > usable) {
    spdlog::warn(
        "max_connections {} is above what {} open files allow; serving at most {} connections",
        settings.max_connections, limit.rlim_cur, usable);
    settings.max_connections = usable;
  }
}

}  // namespace

namespace {

// Opens, binds and listens; returns the port bound. Throws std::runtime_error naming the address.
uint16_t listen_on(tcp::acceptor& acceptor, const std::string& host, int port) {
  boost::system::error_code error;
  auto address = net::ip::make_address(host, error);
  if (error) {
    throw std::runtime_error("cannot listen on '" + host +
                             "': not an IP address (use 127.0.0.1, 0.0.0.0 or ::)");
  }
  tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(net::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(net::socket_base::max_listen_connections, error);
  if (error) {
    throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                             error.message());
  }
  return acceptor.local_endpoint().port();
}

// "127.0.0.1:9100" or "[::1]:9100" as host and port.
std::pair<std::string, int> split_host_port(const std::string& address) {
  size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = -1;
  if (colon != std::string::npos && colon + 1 < address.size() &&
      address.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
      address.size() - colon - 1 <= 5) {
    port = std::stoi(address.substr(colon + 1));
  }
  if (host.empty() || port < 0 || port > 65535) {
    throw std::runtime_error(
        "server.metrics_listen must be HOST:PORT (e.g. 127.0.0.1:9100), got '" + address + "'");
  }
  return {host, port};
}

}  // namespace

void HttpServer::listen() {
  fit_connections_to_descriptor_limit(state_->settings);
  const ServerSettings& settings = state_->settings;
  // A certificate or key that cannot be used stops the start, naming the file.
  if (settings.tls.enabled) {
    state_->tls = std::make_unique<ServerTls>(settings.tls);
    spdlog::info("server.tls: serving {}", state_->tls->describe());
  }
  // Read once here: a signal may close the acceptor (on the io thread) before anyone asks.
  state_->bound_port = listen_on(state_->acceptor, settings.host, settings.port);
  if (!settings.metrics_listen.empty()) {
    auto [host, port] = split_host_port(settings.metrics_listen);
    state_->metrics_acceptor.emplace(state_->io);
    state_->bound_metrics_port = listen_on(*state_->metrics_acceptor, host, port);
  }
  state_->work.emplace(state_->io.get_executor());
  state_->accept();
}

uint16_t HttpServer::metrics_port() const {
  return state_->bound_metrics_port;
}

uint16_t HttpServer::port() const {
  return state_->bound_port;
}

bool HttpServer::serves_tls() const {
  return state_->tls != nullptr;
}

void HttpServer::serve(std::shared_ptr<Pipeline> pipeline) {
  state_->install(std::move(pipeline));
}

void HttpServer::set_reloader(Reloader reloader) {
  state_->reloader = std::move(reloader);
}

void HttpServer::handle_signals() {
  state_->signals.emplace(state_->io, SIGINT, SIGTERM);
  state_->wait_for_signal();
  state_->hangups.emplace(state_->io, SIGHUP);
  state_->wait_for_hangup();
}

void HttpServer::run() {
  std::vector<std::thread> threads;
  for (int i = 1; i < state_->settings.io_threads; ++i) {
    threads.emplace_back([this] { run_io_handlers(state_->io); });
  }
  run_io_handlers(state_->io);
  for (auto& thread : threads)
    thread.join();
}

void HttpServer::shutdown() {
  net::post(state_->io, [state = state_] { state->begin_shutdown(); });
}

}  // namespace chatflow::server
