// The server's life around its connections: accepting them, the signals (SIGTERM/SIGINT drain,
// SIGHUP reloads), draining on shutdown, and installing a pipeline (at start or on reload) while
// the one before finishes what it has.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "framework/server/connection.h"
#include "framework/server/exported_metrics.h"
#include "framework/server/server_state.h"

namespace chatflow::server {

namespace {

std::shared_ptr<tracing::Tracer> make_tracer(const TracingSettings& settings) {
  if (!settings.enabled) return nullptr;
  std::string error;
  auto endpoint = tools::parse_http_url(settings.endpoint, error);
  if (!endpoint) throw std::runtime_error("server.tracing.endpoint: " + error);
  tracing::ExporterSettings exporter;
  exporter.url = settings.endpoint;
  exporter.endpoint = *endpoint;
  exporter.ca_file = settings.ca_file;
  exporter.headers.assign(settings.headers.begin(), settings.headers.end());
  exporter.source.resource_attributes = {{"service.name", settings.service_name},
                                         {"telemetry.sdk.name", std::string("chatflow")},
                                         {"telemetry.sdk.language", std::string("cpp")}};
  exporter.max_queue_spans = static_cast<size_t>(settings.max_queue_spans);
  exporter.max_batch_spans = static_cast<size_t>(settings.max_batch_spans);
  exporter.export_interval = std::chrono::milliseconds(settings.export_interval_ms);
  exporter.timeout = std::chrono::milliseconds(settings.timeout_ms);
  spdlog::info("tracing: sending spans to {} (sampling ratio {})", settings.endpoint,
               settings.sampling_ratio);
  return std::make_shared<tracing::Tracer>(std::move(exporter), settings.sampling_ratio);
}

// The exporter's counters, read at scrape time.
void register_tracing_metrics(MetricsRegistry& metrics,
                              const std::shared_ptr<tracing::Tracer>& tracer) {
  if (!tracer) return;
  auto counter = [&](const MetricDefinition& metric,
                     uint64_t (*read)(const tracing::SpanExporter&)) {
    metrics.sampled(metric, [tracer, read]() {
      return std::vector<std::pair<LabelValues, double>>{{{}, double(read(tracer->exporter()))}};
    });
  };
  counter(exported_metric("chatflow:trace_spans_exported_total"),
          [](const tracing::SpanExporter& e) { return e.exported_spans(); });
  counter(exported_metric("chatflow:trace_spans_dropped_total"),
          [](const tracing::SpanExporter& e) { return e.dropped_spans(); });
  counter(exported_metric("chatflow:trace_exports_failed_total"),
          [](const tracing::SpanExporter& e) { return e.failed_exports(); });
}

}  // namespace

ServerState::ServerState(ServerSettings settings)
    : settings(std::move(settings)),
      io(this->settings.io_threads),
      acceptor(io),
      drain_timer(io),
      access_log(std::make_shared<AccessLog>(this->settings.access_log)),
      tracer(make_tracer(this->settings.tracing)) {}

void ServerState::count_http(std::string_view endpoint, int status) {
  metrics
      .counter(exported_metric("chatflow:http_requests_total"),
               {std::string(endpoint), std::to_string(status)})
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

namespace {

// Out of descriptors (or kernel memory): accepting again at once would spin on the same error.
bool out_of_descriptors(const boost::system::error_code& error) {
  return error == boost::system::errc::too_many_files_open ||
         error == boost::system::errc::too_many_files_open_in_system ||
         error == boost::system::errc::no_buffer_space ||
         error == boost::system::errc::not_enough_memory;
}

// Past max_connections with no idle connection to shed: answered, not silently closed, so the
// client (or the proxy in front) knows to retry elsewhere.
void refuse_connection(tcp::socket socket, int retry_after_s) {
  static const std::string body =
      R"({"error":{"message":"the server is at its connection limit; retry shortly",)"
      R"("type":"server_error","param":null,"code":"too_many_connections"}})";
  auto refused = std::make_shared<tcp::socket>(std::move(socket));
  auto response = std::make_shared<std::string>(
      "HTTP/1.1 503 Service Unavailable\r\nServer: chatflow\r\nContent-Type: application/json\r\n"
      "Retry-After: " +
      std::to_string(retry_after_s) + "\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body);
  net::async_write(*refused, net::buffer(*response),
                   [refused, response](boost::system::error_code, size_t) {
                     boost::system::error_code ignored;
                     refused->shutdown(tcp::socket::shutdown_both, ignored);
                     refused->close(ignored);
                   });
}

}  // namespace

// Closes the connection that has waited longest for its next request; false when none is idle.
bool ServerState::shed_idle_connection() {
  std::shared_ptr<Connection> oldest;
  int64_t oldest_since = 0;
  for (auto& connection : open_connections()) {
    int64_t since = connection->idle_since_ns();
    if (since > 0 && (!oldest || since < oldest_since)) {
      oldest = connection;
      oldest_since = since;
    }
  }
  if (!oldest) return false;
  oldest->close_if_idle();
  return true;
}

int64_t ServerState::anonymous_exchange_limit() const {
  auto limit = static_cast<int64_t>(static_cast<double>(settings.max_connections) *
                                    settings.anonymous_connection_share);
  return std::max<int64_t>(1, limit);
}

void ServerState::release_connection_slot() {
  std::lock_guard lock(mutex);
  --connection_slots_used;
}

void ServerState::start_connection(tcp::socket socket, bool metrics_only) {
  std::shared_ptr<Connection> connection;
  try {
    connection = std::make_shared<Connection>(std::move(socket), shared_from_this(), metrics_only,
                                              metrics_only || !tls ? nullptr : tls->context());
  } catch (const std::exception& error) {
    // The slot was taken for it; without a connection nobody else gives it back.
    spdlog::error("cannot set up an accepted connection: {}", error.what());
    release_connection_slot();
    return;
  }
  {
    std::lock_guard lock(mutex);
    connections[connection.get()] = connection;
  }
  connection->start();
}

namespace {

// The idle connections (waiting for a request, sending their header, or lingering), the one
// that has waited longest first.
std::vector<std::shared_ptr<Connection>> idle_oldest_first(
    std::vector<std::shared_ptr<Connection>> open) {
  std::vector<std::pair<int64_t, std::shared_ptr<Connection>>> idle;
  for (auto& connection : open) {
    int64_t since = connection->idle_since_ns();
    if (since > 0) idle.emplace_back(since, std::move(connection));
  }
  std::sort(idle.begin(), idle.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::shared_ptr<Connection>> ordered;
  for (auto& entry : idle)
    ordered.push_back(std::move(entry.second));
  return ordered;
}

}  // namespace

bool ServerState::take_free_slot() {
  std::lock_guard lock(mutex);
  if (connection_slots_used >= settings.max_connections) return false;
  ++connection_slots_used;
  return true;
}

// Exact under a burst: a slot is taken under the lock, and an idle connection closed to make
// room hands its own slot to the one new socket that claimed it (claimed once, so a burst of
// accepts cannot all count on the same idle connection).
void ServerState::admit(tcp::socket socket, bool metrics_only) {
  if (take_free_slot()) return start_connection(std::move(socket), metrics_only);
  for (auto& idle : idle_oldest_first(open_connections())) {
    if (!idle->claim_for_shedding()) continue;
    auto waiting = std::make_shared<tcp::socket>(std::move(socket));
    idle->hand_over_slot([self = shared_from_this(), waiting, metrics_only](bool handed) {
      if (handed || self->take_free_slot()) {
        return self->start_connection(std::move(*waiting), metrics_only);
      }
      // It became busy before it could be closed, and nothing else freed up.
      refuse_connection(std::move(*waiting), self->settings.retry_after_s);
    });
    return;
  }
  refuse_connection(std::move(socket), settings.retry_after_s);
}

void ServerState::accept() {
  accept_on(acceptor, false);
  if (metrics_acceptor) accept_on(*metrics_acceptor, true);
}

void ServerState::accept_on(tcp::acceptor& listening, bool metrics_only) {
  listening.async_accept(net::make_strand(io), [self = shared_from_this(), &listening,
                                                metrics_only](boost::system::error_code error,
                                                              tcp::socket socket) {
    if (error == net::error::operation_aborted || !listening.is_open()) return;
    if (out_of_descriptors(error)) {
      spdlog::warn("cannot accept a connection ({}); shedding an idle one and retrying in 50 ms",
                   error.message());
      self->shed_idle_connection();
      auto pause = std::make_shared<net::steady_timer>(self->io, std::chrono::milliseconds(50));
      pause->async_wait(
          [self, pause, &listening, metrics_only](boost::system::error_code wait_error) {
            if (!wait_error && !self->draining) self->accept_on(listening, metrics_only);
          });
      return;
    }
    if (!error) self->admit(std::move(socket), metrics_only);
    self->accept_on(listening, metrics_only);
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
  if (model_router) model_router->stop_waiting();
  size_t count;
  {
    std::lock_guard lock(mutex);
    count = in_flight.size();
  }
  spdlog::info("shutting down: waiting up to {} s for {} requests in flight",
               settings.shutdown_timeout_s, count);
  boost::system::error_code ignored;
  acceptor.close(ignored);
  if (metrics_acceptor) metrics_acceptor->close(ignored);
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
  if (metrics_acceptor) metrics_acceptor->close(ignored);
  if (signals) signals->cancel(ignored);
  if (hangups) hangups->cancel(ignored);
  drain_timer.cancel();
  for (auto& connection : open_connections())
    connection->abort();
  if (model_router) model_router->stop_waiting();
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

std::unique_ptr<ServedPipeline> describe_pipeline(std::shared_ptr<Pipeline> pipeline,
                                                  MetricsRegistry& metrics) {
  auto fresh = std::make_unique<ServedPipeline>();
  fresh->pipeline = pipeline;
  fresh->created = unix_seconds();
  for (const auto& resource_spec : pipeline->spec().resources) {
    auto model =
        std::dynamic_pointer_cast<const ServedModel>(pipeline->resource(resource_spec.name));
    if (model) fresh->models.push_back(model);
  }
  // The models that generate are the ones clients may name; a counting-only model only when
  // nothing else is there (its /tokenize still answers to its name).
  bool any_generates = std::any_of(fresh->models.begin(), fresh->models.end(),
                                   [](const auto& model) { return model->generates(); });
  for (const auto& model : fresh->models) {
    if (model->generates() || !any_generates) fresh->model_ids.push_back(model->model_id());
  }
  // A pipeline without a model (echo) still answers to its own name.
  if (fresh->model_ids.empty()) fresh->model_ids.push_back(pipeline->spec().name);
  fresh->metrics = std::make_unique<RequestMetrics>(metrics, pipeline->spec());
  fresh->authenticator = pipeline->find<Authenticator>();
  fresh->usage = pipeline->find<UsageReporter>();
  fresh->caches = pipeline->find_all<CacheAdmin>();
  fresh->history = pipeline->find<HistoryReader>();
  for (StorageHealth* store : pipeline->find_all<StorageHealth>())
    fresh->storage.push_back(store);
  return fresh;
}

void ServerState::install(std::shared_ptr<Pipeline> pipeline) {
  std::unique_ptr<ServedPipeline> fresh = describe_pipeline(pipeline, metrics);
  metrics.clear_samplers();
  if (model_router) model_router->register_metrics(metrics);
  register_engine_metrics(metrics, fresh->models, pipeline);
  register_tracing_metrics(metrics, tracer);
  std::weak_ptr<ServerState> weak = weak_from_this();
  metrics.sampled(exported_metric("chatflow:http_open_connections"), [weak]() {
    std::vector<std::pair<LabelValues, double>> samples;
    if (auto state = weak.lock()) {
      std::lock_guard lock(state->mutex);
      samples.push_back({{}, double(state->connection_slots_used)});
    }
    return samples;
  });
  std::shared_ptr<const ServedPipeline> adopted = PipelineReaper::adopt(std::move(fresh), reaper);
  std::shared_ptr<const ServedPipeline> old;
  {
    std::lock_guard lock(mutex);
    old = std::exchange(served, std::move(adopted));
  }
  // Requests already admitted finish on the old pipeline; it goes once they have and every
  // connection routed with it has let go (on the reaper's thread, whoever lets go last).
  if (old) in_background([old] { old->pipeline->drain(); });
}

ServerState::ReloadOutcome ServerState::reload() {
  std::lock_guard one_at_a_time(reload_mutex);
  ReloadOutcome outcome;
  if (tls) {
    // Certificates are rotated on their own schedule: read them whatever the pipeline does.
    outcome.tls = tls->reload();
    if (outcome.tls->ok) {
      spdlog::info("server.tls: certificate and key read again; serving {}",
                   outcome.tls->certificate);
    } else {
      spdlog::error(
          "server.tls: the certificate and key were not reloaded, the old ones keep "
          "serving ({}): {}",
          outcome.tls->certificate, outcome.tls->error);
    }
  }
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
    // The models: entries' pipelines are read again on their next use.
    if (model_router) model_router->unload_all();
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
