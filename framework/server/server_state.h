// The server's shared state: the I/O context and acceptor, the pipeline being served, the open
// connections and requests in flight, and the lifecycle around them (accept, signals, drain,
// reload; lifecycle.cpp). Connections hold it through a shared_ptr, so it outlives them all.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "framework/responses/response_store.h"
#include "framework/server/access_log.h"
#include "framework/server/dashboard_history.h"
#include "framework/server/forwarded.h"
#include "framework/server/http_server.h"
#include "framework/server/metrics.h"
#include "framework/server/model_router.h"
#include "framework/server/pipeline_reaper.h"
#include "framework/server/served_pipeline.h"
#include "framework/server/server_config.h"
#include "framework/server/server_tls.h"
#include "framework/server/static_files.h"
#include "framework/server/worker_pool.h"
#include "framework/tracing/tracer.h"

namespace chatflow::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

class Connection;

// server.trusted_proxies, checked by settings_problems before a server is made.
inline TrustedProxies parse_trusted_proxies(const std::vector<std::string>& networks) {
  std::string error;
  auto proxies = TrustedProxies::parse(networks, error);
  if (!proxies) throw std::invalid_argument("server.trusted_proxies: " + error);
  return *proxies;
}

class ServerState : public std::enable_shared_from_this<ServerState> {
 public:
  explicit ServerState(ServerSettings settings);

  std::shared_ptr<const ServedPipeline> served_snapshot() {
    std::lock_guard lock(mutex);
    return served;
  }

  void track(const std::shared_ptr<Request>& request) {
    std::lock_guard lock(mutex);
    in_flight.insert(request);
  }
  void untrack(const std::shared_ptr<Request>& request) {
    std::lock_guard lock(mutex);
    in_flight.erase(request);
  }
  void count_http(std::string_view endpoint, int status);

  // Accepts on the main address and, when configured, the metrics address.
  void accept();
  void accept_on(tcp::acceptor& listening, bool metrics_only);
  // A new socket gets a connection slot (max_connections of them, main and metrics addresses
  // together): a free one, else the slot of an idle connection closed for it, else a 503.
  void admit(tcp::socket socket, bool metrics_only);
  void start_connection(tcp::socket socket, bool metrics_only);
  void release_connection_slot();
  bool take_free_slot();
  bool shed_idle_connection();
  // How many anonymous exchanges (ServerSettings::anonymous_connection_share) may be open.
  int64_t anonymous_exchange_limit() const;
  void wait_for_signal();
  void wait_for_hangup();

  // Puts `pipeline` in service; the one before (if any) drains in the background.
  void install(std::shared_ptr<Pipeline> pipeline);

  struct ReloadOutcome {
    bool ok = false;
    std::string pipeline;
    std::vector<std::string> reused;
    std::string error;
    std::optional<ServerTls::ReloadOutcome> tls;  // server.tls's files, read again
  };
  // Builds and installs the configured pipeline again; one reload at a time.
  ReloadOutcome reload();
  // Runs `work` on a thread of its own, joined when the server goes away.
  void in_background(std::function<void()> work);
  void join_background();
  void begin_shutdown();
  // Closes every connection and cancels every request at once (the server is being destroyed).
  void abort_all();
  void cancel_in_flight();
  void poll_drain();
  void poll_connections_closed(std::chrono::steady_clock::time_point give_up);
  std::vector<std::shared_ptr<Connection>> open_connections();

  ServerSettings settings;
  // Destroys every served pipeline once its last user lets go, off the I/O threads.
  std::shared_ptr<PipelineReaper> reaper = std::make_shared<PipelineReaper>();
  StaticFiles static_files{settings.web_root};  // GET /, /dashboard, /assets/
  TrustedProxies trusted_proxies = parse_trusted_proxies(settings.trusted_proxies);
  net::io_context io;
  tcp::acceptor acceptor;
  std::optional<tcp::acceptor> metrics_acceptor;  // server.metrics_listen
  std::unique_ptr<ServerTls> tls;                 // server.tls; null when off
  uint16_t bound_metrics_port = 0;
  uint16_t bound_port = 0;  // set by listen(), before the io thread starts
  net::steady_timer drain_timer;
  std::optional<net::signal_set> signals;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  MetricsRegistry metrics;
  DashboardHistory dashboard_history{metrics};  // GET /v1/dashboard/history: samples `metrics`
  WorkerPool workers{2, 256};  // side endpoints that must not hold up an I/O thread
  std::shared_ptr<AccessLog> access_log;
  std::shared_ptr<tracing::Tracer> tracer;  // server.tracing; null when off
  // The Responses API's kept responses (`store`), per owner, in memory: they outlive reloads.
  responses::ResponseStore responses;
  std::atomic<bool> draining{false};
  bool cancelled_in_flight = false;  // io thread of the drain timer only
  std::chrono::steady_clock::time_point drain_deadline;

  std::optional<net::signal_set> hangups;
  HttpServer::Reloader reloader;
  std::mutex reload_mutex;
  std::mutex background_mutex;
  std::vector<std::thread> background;
  std::atomic<int> background_running{0};

  // Requests without credentials with a body still to read or an answer still to come.
  std::atomic<int64_t> anonymous_exchanges{0};

  std::mutex mutex;
  int64_t connection_slots_used = 0;  // sockets admitted and not yet closed
  std::shared_ptr<const ServedPipeline> served;
  std::set<std::shared_ptr<Request>> in_flight;
  std::map<Connection*, std::weak_ptr<Connection>> connections;
  // The serve file's `models:` (HttpServer::set_models, before listen()); null without them.
  std::shared_ptr<ModelRouter> model_router;
};

}  // namespace chatflow::server
