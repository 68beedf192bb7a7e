// The server's life around its connections: accepting them, the signals (SIGTERM/SIGINT drain,
// SIGHUP reloads), draining on shutdown, and installing a pipeline (at start or on reload) while
// the one before finishes what it has.
#include <spdlog/spdlog.h>

#include "framework/server/connection.h"
#include "framework/server/server_state.h"

namespace chatflow::server {

ServerState::ServerState(ServerSettings settings)
    : settings(std::move(settings)),
      io(this->settings.io_threads),
      acceptor(io),
      drain_timer(io),
      access_log(std::make_shared<AccessLog>(this->settings.access_log)) {}

void ServerState::count_http(std::string_view endpoint, int status) {
  metrics
      .counter("chatflow:http_requests_total", "HTTP requests answered, by endpoint and status.",
               {{"endpoint", std::string(endpoint)}, {"status", std::to_string(status)}})
      .add();
}

std::vector<std::shared_ptr<Connection>> ServerState::open_connections() {
  std::vector<std::shared_ptr<Connection>> open;
  std::lock_guard lock(mutex);
  for (auto& [key, weak] : connections) {
    if (auto connection = weak.lock()) open.push_back(connection);
  }
  return open;
}

void ServerState::accept() {
  acceptor.async_accept(
      net::make_strand(io),
      [self = shared_from_this()](boost::system::error_code error, tcp::socket socket) {
        if (error == net::error::operation_aborted || !self->acceptor.is_open()) return;
        if (!error) {
          bool over_limit;
          {
            std::lock_guard lock(self->mutex);
            over_limit =
                static_cast<int64_t>(self->connections.size()) >= self->settings.max_connections;
          }
          if (over_limit) {
            boost::system::error_code ignored;
            socket.close(ignored);
          } else {
            auto connection = std::make_shared<Connection>(std::move(socket), self);
            {
              std::lock_guard lock(self->mutex);
              self->connections[connection.get()] = connection;
            }
            connection->start();
          }
        }
        self->accept();
      });
}

void ServerState::wait_for_signal() {
  signals->async_wait([self = shared_from_this()](boost::system::error_code error, int) {
    if (error) return;
    self->begin_shutdown();
    self->wait_for_signal();  // a second signal cancels what is still running
  });
}

void ServerState::begin_shutdown() {
  if (draining.exchange(true)) {
    spdlog::warn("second signal: cancelling the requests still in flight");
    drain_deadline = std::chrono::steady_clock::now();
    return;
  }
  size_t count;
  {
    std::lock_guard lock(mutex);
    count = in_flight.size();
  }
  spdlog::info("shutting down: waiting up to {} s for {} requests in flight",
               settings.shutdown_timeout_s, count);
  boost::system::error_code ignored;
  acceptor.close(ignored);
  for (auto& connection : open_connections())
    connection->drain();
  drain_deadline = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(settings.shutdown_timeout_s));
  poll_drain();
}

void ServerState::abort_all() {
  draining = true;
  boost::system::error_code ignored;
  acceptor.close(ignored);
  if (signals) signals->cancel(ignored);
  if (hangups) hangups->cancel(ignored);
  drain_timer.cancel();
  for (auto& connection : open_connections())
    connection->abort();
  cancel_in_flight();
}

void ServerState::cancel_in_flight() {
  std::vector<std::shared_ptr<Request>> requests;
  {
    std::lock_guard lock(mutex);
    requests.assign(in_flight.begin(), in_flight.end());
  }
  if (!requests.empty()) {
    spdlog::warn("shutdown timeout: cancelling {} requests still in flight", requests.size());
  }
  for (auto& request : requests) {
    request->cancel(make_error(503, "server_error",
                               "the server is shutting down; retry the request",
                               "server_shutting_down"));
  }
}

void ServerState::poll_drain() {
  drain_timer.expires_after(std::chrono::milliseconds(20));
  drain_timer.async_wait([self = shared_from_this()](boost::system::error_code error) {
    if (error) return;
    bool idle;
    {
      std::lock_guard lock(self->mutex);
      idle = self->in_flight.empty();
    }
    if (idle) {
      // Every response is queued; let the connections flush and close, then stop.
      if (self->signals) self->signals->cancel();
      if (self->hangups) self->hangups->cancel();
      self->poll_connections_closed(std::chrono::steady_clock::now() + std::chrono::seconds(5));
      return;
    }
    if (!self->cancelled_in_flight && std::chrono::steady_clock::now() >= self->drain_deadline) {
      self->cancelled_in_flight = true;
      self->cancel_in_flight();
    }
    self->poll_drain();
  });
}

void ServerState::poll_connections_closed(std::chrono::steady_clock::time_point give_up) {
  bool closed;
  {
    std::lock_guard lock(mutex);
    closed = connections.empty();
  }
  if (closed || std::chrono::steady_clock::now() >= give_up) {
    work.reset();
    io.stop();
    return;
  }
  drain_timer.expires_after(std::chrono::milliseconds(10));
  drain_timer.async_wait([self = shared_from_this(), give_up](boost::system::error_code error) {
    if (!error) self->poll_connections_closed(give_up);
  });
}

void ServerState::install(std::shared_ptr<Pipeline> pipeline) {
  auto fresh = std::make_shared<ServedPipeline>();
  fresh->pipeline = pipeline;
  fresh->created = unix_seconds();
  for (const auto& resource_spec : pipeline->spec().resources) {
    auto model =
        std::dynamic_pointer_cast<const ServedModel>(pipeline->resource(resource_spec.name));
    if (!model) continue;
    fresh->models.push_back(model);
    fresh->model_ids.push_back(model->model_id());
  }
  // A pipeline without a model (echo) still answers to its own name.
  if (fresh->model_ids.empty()) fresh->model_ids.push_back(pipeline->spec().name);
  fresh->metrics = std::make_unique<RequestMetrics>(metrics, pipeline->spec());
  fresh->authenticator = pipeline->find<Authenticator>();
  fresh->usage = pipeline->find<UsageReporter>();
  fresh->caches = pipeline->find_all<CacheAdmin>();
  fresh->history = pipeline->find<HistoryReader>();
  metrics.clear_samplers();
  register_engine_metrics(metrics, fresh->models, pipeline);
  std::shared_ptr<const ServedPipeline> old;
  {
    std::lock_guard lock(mutex);
    old = std::exchange(served, std::move(fresh));
  }
  // Requests already admitted finish on the old pipeline; it goes once they have.
  if (old) in_background([old] { old->pipeline->drain(); });
}

ServerState::ReloadOutcome ServerState::reload() {
  std::lock_guard one_at_a_time(reload_mutex);
  ReloadOutcome outcome;
  auto current = served_snapshot();
  if (!reloader || !current) {
    outcome.error = "nothing to reload yet";
    return outcome;
  }
  if (draining) {
    outcome.error = "the server is shutting down";
    return outcome;
  }
  try {
    auto pipeline = reloader(*current->pipeline, outcome.reused, outcome.error);
    if (!pipeline) return outcome;
    outcome.pipeline = pipeline->spec().name;
    install(std::move(pipeline));
    outcome.ok = true;
  } catch (const std::exception& error) {
    outcome.error = error.what();
  }
  return outcome;
}

void ServerState::in_background(std::function<void()> work) {
  std::lock_guard lock(background_mutex);
  background_running.fetch_add(1, std::memory_order_relaxed);
  background.emplace_back([this, work = std::move(work)] {
    work();
    background_running.fetch_sub(1, std::memory_order_release);
  });
}

void ServerState::join_background() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(background_mutex);
    threads.swap(background);
  }
  for (auto& thread : threads)
    if (thread.joinable()) thread.join();
}

void ServerState::wait_for_hangup() {
  hangups->async_wait([self = shared_from_this()](boost::system::error_code error, int) {
    if (error) return;
    self->in_background([self] {
      auto outcome = self->reload();
      if (outcome.ok) {
        std::string kept;
        for (const auto& name : outcome.reused)
          kept += (kept.empty() ? "" : ", ") + name;
        spdlog::info("SIGHUP: reloaded pipeline '{}' (resources kept: {})", outcome.pipeline,
                     kept.empty() ? "none" : kept);
      } else {
        spdlog::error(
            "SIGHUP: the new configuration was not applied; the old pipeline keeps "
            "serving:\n{}",
            outcome.error);
      }
    });
    self->wait_for_hangup();
  });
}

}  // namespace chatflow::server
