#include "framework/server/http_server.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "framework/api/served_model.h"
#include "framework/server/access_log.h"
#include "framework/openai/openai_protocol.h"
#include "framework/server/server_metrics.h"
#include "framework/api/capabilities.h"
#include "framework/api/sink.h"

namespace chatflow::server {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;

namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
// A client that reads slower than we generate gets its request cancelled past this backlog.
constexpr size_t kMaxQueuedBytes = 64u << 20;
// After refusing a body, how long we keep reading (and discarding) before closing, so the client
// sees our response instead of a connection reset.
constexpr auto kLingerTime = std::chrono::seconds(3);

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i)
    id += kDigits[generator() & 15];
  return id;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// RFC 9110's IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date() {
  std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, "%a, %d %b %Y %H:%M:%S GMT", &parts);
  return buffer;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

RequestError make_error(int status, std::string type, std::string message, std::string code = {},
                        std::string param = {}) {
  return RequestError{status, std::move(type), std::move(message), std::move(code),
                      std::move(param)};
}

struct Response {
  Response(int status, std::string body, std::string content_type = "application/json")
      : status(status), body(std::move(body)), content_type(std::move(content_type)) {}
  int status;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
};

Response error_response(const RequestError& error) {
  return Response(error.status, error_json(error));
}

// The routes and the methods they accept, for 404 versus 405 and the Allow header.
struct Route {
  std::string_view path;
  std::string_view methods;
};
constexpr Route kRoutes[] = {
    {"/v1/chat/completions", "POST"},
    {"/v1/completions", "POST"},
    {"/v1/models", "GET"},
    {"/health", "GET"},
    {"/metrics", "GET"},
    {"/tokenize", "POST"},
    {"/detokenize", "POST"},
    {"/v1/usage", "GET"},
    {"/v1/cache", "DELETE"},
    {"/admin/reload", "POST"},
};

// The value of `name` in a URL query ("a=1&tenant=acme"), undecoded; empty when absent.
std::string query_value(std::string_view query, std::string_view name) {
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    std::string_view pair = query.substr(start, end - start);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name &&
        pair[name.size()] == '=') {
      return std::string(pair.substr(name.size() + 1));
    }
    start = end + 1;
  }
  return {};
}

}  // namespace

// What serve() installed: read by every request through one shared_ptr copy.
struct Served {
  std::shared_ptr<Pipeline> pipeline;
  std::vector<std::shared_ptr<const ServedModel>> models;
  std::vector<std::string> model_ids;
  std::unique_ptr<RequestMetrics> metrics;
  int64_t created = 0;
  // Offered by a stage or resource of the pipeline (the auth stage, the quota stage), or null.
  const Authenticator* authenticator = nullptr;
  const UsageReporter* usage = nullptr;
  std::vector<CacheAdmin*> caches;
  HistoryReader* history = nullptr;

  const ServedModel* model(const std::string& id) const {
    for (const auto& model : models) {
      if (id.empty() || model->model_id() == id) return model.get();
    }
    return nullptr;
  }
};

class Session;

struct HttpServer::State : std::enable_shared_from_this<HttpServer::State> {
  explicit State(ServerSettings settings)
      : settings(std::move(settings)),
        io(this->settings.io_threads),
        acceptor(io),
        drain_timer(io),
        access_log(std::make_shared<AccessLog>(this->settings.access_log)) {}

  std::shared_ptr<const Served> served_snapshot() {
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

  void count_http(std::string_view endpoint, int status) {
    metrics
        .counter("chatflow:http_requests_total", "HTTP requests answered, by endpoint and status.",
                 {{"endpoint", std::string(endpoint)}, {"status", std::to_string(status)}})
        .add();
  }

  void accept();
  void wait_for_signal();
  void wait_for_hangup();

  // Puts `pipeline` in service; the one before (if any) drains in the background.
  void install(std::shared_ptr<Pipeline> pipeline);

  struct ReloadOutcome {
    bool ok = false;
    std::string pipeline;
    std::vector<std::string> reused;
    std::string error;
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
  void poll_sessions_closed(std::chrono::steady_clock::time_point give_up);

  ServerSettings settings;
  net::io_context io;
  tcp::acceptor acceptor;
  uint16_t bound_port = 0;  // set by listen(), before the io thread starts
  net::steady_timer drain_timer;
  std::optional<net::signal_set> signals;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  MetricsRegistry metrics;
  std::shared_ptr<AccessLog> access_log;
  std::atomic<bool> draining{false};
  bool cancelled_in_flight = false;  // io thread of the drain timer only
  std::chrono::steady_clock::time_point drain_deadline;

  std::optional<net::signal_set> hangups;
  HttpServer::Reloader reloader;
  std::mutex reload_mutex;
  std::mutex background_mutex;
  std::vector<std::thread> background;
  std::atomic<int> background_running{0};

  std::mutex mutex;
  std::shared_ptr<const Served> served;
  std::set<std::shared_ptr<Request>> in_flight;
  std::map<Session*, std::weak_ptr<Session>> sessions;
};

namespace {

// How one exchange ended, as the sink saw it.
struct Outcome {
  std::string body;  // the non-streaming JSON response, when the request succeeded
};

class HttpSink;

}  // namespace

// One TCP connection. Everything below runs on the connection's strand, except the public
// deliver/complete/drain, which post onto it.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<HttpServer::State> state)
      : stream_(std::move(socket)), state_(std::move(state)), timer_(stream_.get_executor()) {
    boost::system::error_code ignored;
    stream_.socket().set_option(tcp::no_delay(true), ignored);
    auto endpoint = stream_.socket().remote_endpoint(ignored);
    remote_ = endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  }

  ~Session() {
    std::lock_guard lock(state_->mutex);
    state_->sessions.erase(this);
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
  }

  // From sinks, on pipeline threads.
  void deliver(uint64_t exchange, std::string bytes) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), exchange, bytes = std::move(bytes)]() mutable {
                self->on_deliver(exchange, std::move(bytes));
              });
  }
  void complete(uint64_t exchange, Outcome outcome) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), exchange, outcome = std::move(outcome)]() mutable {
                self->on_complete(exchange, std::move(outcome));
              });
  }
  // The server is going away now: cancel the request in flight and close.
  void abort() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->request_) return self->client_gone();
      self->close();
    });
  }
  // The server is shutting down: close when idle, or after the exchange in flight.
  void drain() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->keep_alive_ = false;
      if (!self->request_ && !self->writing_ && !self->reading_body_) self->close();
    });
  }

 private:
  // --- Reading requests. ---
  void read_header() {
    if (closed_) return;
    method_ = "-";
    path_ = "-";
    if (state_->draining && !request_) {
      close();
      return;
    }
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(state_->settings.max_body_bytes));
    parser_->header_limit(kMaxHeaderBytes);
    stream_.expires_after(keep_alive_timeout());
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code error, size_t) { self->on_header(error); });
  }

  void on_header(beast::error_code error) {
    if (error) return on_read_error(error);
    received_ns_ = now_ns();
    const auto& header = parser_->get();
    method_ = std::string(header.method_string());
    path_ = std::string(header.target().substr(0, header.target().find('?')));
    if (auto length = parser_->content_length();
        length && *length > static_cast<uint64_t>(state_->settings.max_body_bytes)) {
      return reject_body(413, "the request body is " + std::to_string(*length) +
                                  " bytes; this server accepts at most " +
                                  std::to_string(state_->settings.max_body_bytes));
    }
    // curl and others wait (a whole second) for this before sending a body over 1 KiB.
    if (lowercase(header[http::field::expect]) == "100-continue" && !parser_->is_done()) {
      send("HTTP/1.1 100 Continue\r\n\r\n");
    }
    reading_body_ = true;
    stream_.expires_after(keep_alive_timeout());
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code error, size_t) {
                       self->reading_body_ = false;
                       if (error) return self->on_read_error(error);
                       self->handle(self->parser_->release());
                     });
  }

  void on_read_error(beast::error_code error) {
    if (error == http::error::end_of_stream || error == beast::error::timeout ||
        error == net::error::operation_aborted || error == net::error::connection_reset ||
        error == net::error::eof || closed_) {
      close();
    } else if (error == http::error::body_limit) {
      reject_body(413, "the request body is larger than the " +
                           std::to_string(state_->settings.max_body_bytes) +
                           " bytes this server accepts");
    } else if (error == http::error::header_limit) {
      reject_body(
          431, "the request headers are larger than " + std::to_string(kMaxHeaderBytes) + " bytes");
    } else if (error.category() == http::make_error_code(http::error::bad_target).category()) {
      reject_body(400, "malformed HTTP request: " + error.message());
    } else {
      close();
    }
  }

  // Answers `status` and closes, reading and discarding what the client still sends for a
  // while, so it reads the answer rather than a reset.
  void reject_body(int status, const std::string& message) {
    keep_alive_ = false;
    lingering_ = true;
    std::string code = status == 413   ? "request_too_large"
                       : status == 431 ? "headers_too_large"
                                       : "bad_request";
    respond_error(make_error(status, "invalid_request_error", message, code), "other");
  }

  // --- Routing. ---
  void handle(http::request<http::string_body> message) {
    ++exchange_;
    keep_alive_ = message.keep_alive() && !state_->draining;
    http10_ = message.version() < 11;
    method_ = std::string(message.method_string());
    std::string_view target = message.target();
    path_ = std::string(target.substr(0, target.find('?')));
    query_ = target.find('?') == std::string_view::npos
                 ? std::string()
                 : std::string(target.substr(target.find('?') + 1));
    while (path_.size() > 1 && path_.back() == '/')
      path_.pop_back();
    headers_.clear();
    for (const auto& field : message) {
      headers_.emplace_back(lowercase(field.name_string()), std::string(field.value()));
    }

    const Route* route = nullptr;
    for (const auto& candidate : kRoutes) {
      if (candidate.path == path_) route = &candidate;
    }
    bool model_route = path_.rfind("/v1/models/", 0) == 0;
    bool session_route = path_.rfind("/v1/sessions/", 0) == 0 && path_.size() > 13;
    if (!route && !model_route && !session_route) {
      return respond_error(make_error(404, "invalid_request_error",
                                      "no route for " + method_ + " " + path_, "not_found"),
                           "other");
    }
    std::string endpoint = route         ? std::string(route->path)
                           : model_route ? "/v1/models/{id}"
                                         : "/v1/sessions/{id}";
    std::string_view allowed = route ? route->methods : "GET";
    if (message.method() == http::verb::options) {
      Response response(204, "", "");
      response.headers = {{"Access-Control-Allow-Methods", std::string(allowed) + ", OPTIONS"},
                          {"Access-Control-Allow-Headers",
                           "Authorization, Content-Type, X-Request-Id, OpenAI-Organization, "
                           "OpenAI-Project, X-Stainless-*"},
                          {"Access-Control-Max-Age", "86400"}};
      return respond(std::move(response), endpoint);
    }
    if (message.method_string() != allowed) {
      Response response = error_response(
          make_error(405, "invalid_request_error",
                     method_ + " is not allowed on " + path_ + "; use " + std::string(allowed),
                     "method_not_allowed"));
      response.headers.push_back({"Allow", std::string(allowed) + ", OPTIONS"});
      return respond(std::move(response), endpoint);
    }
    bool bodyless = path_ == "/admin/reload" && message.body().empty();
    if ((message.method() == http::verb::post || message.method() == http::verb::delete_) &&
        !bodyless) {
      std::string type = lowercase(message[http::field::content_type]);
      type = type.substr(0, type.find(';'));
      while (!type.empty() && type.back() == ' ')
        type.pop_back();
      if (type != "application/json") {
        return respond_error(
            make_error(415, "invalid_request_error",
                       "the body must be JSON sent with 'Content-Type: application/json'" +
                           (type.empty() ? std::string(" (no Content-Type was given)")
                                         : ", got '" + type + "'"),
                       "unsupported_media_type"),
            endpoint);
      }
    }
    auto served = state_->served_snapshot();
    // Routes outside the pipeline answer only to the credentials the pipeline's auth accepts
    // (the completion routes go through the auth stage itself).
    Identity caller;
    bool completion_route = path_ == "/v1/chat/completions" || path_ == "/v1/completions";
    if (served && served->authenticator && !completion_route &&
        !served->authenticator->is_public(path_)) {
      try {
        caller = served->authenticator->authenticate(headers_);
      } catch (const RequestFailure& failure) {
        return respond_error(failure.error(), endpoint);
      }
    }
    if (path_ == "/health") return health();
    if (path_ == "/metrics") {
      return respond(
          Response(200, state_->metrics.render(), "text/plain; version=0.0.4; charset=utf-8"),
          endpoint);
    }
    if (!served) {
      Response response = error_response(make_error(
          503, "server_error", "the model is still loading; retry shortly", "model_loading"));
      response.headers.push_back({"Retry-After", "1"});
      return respond(std::move(response), endpoint);
    }
    try {
      if (path_ == "/v1/models") return respond(Response(200, models_json(*served)), endpoint);
      if (model_route) return model_info(*served, path_.substr(std::string("/v1/models/").size()));
      if (session_route) return session(*served, caller, path_.substr(13));
      if (path_ == "/tokenize") return tokenize(*served, message.body());
      if (path_ == "/detokenize") return detokenize(*served, message.body());
      if (path_ == "/v1/usage") return usage(*served, caller);
      if (path_ == "/v1/cache") return forget(*served, caller, message.body());
      if (path_ == "/admin/reload") return reload(*served, caller, endpoint);
      RequestKind kind =
          path_ == "/v1/chat/completions" ? RequestKind::chat : RequestKind::completion;
      return start_generation(served, kind, message.body(), endpoint);
    } catch (const RequestFailure& failure) {
      return respond_error(failure.error(), endpoint);
    }
  }

  void health() {
    if (state_->draining) {
      return respond(Response{503, R"({"status":"draining"})"}, "/health");
    }
    if (!state_->served_snapshot()) {
      return respond(Response{503, R"({"status":"loading"})"}, "/health");
    }
    respond(Response{200, R"({"status":"ok"})"}, "/health");
  }

  static json::object model_object(const Served& served, const std::string& id) {
    json::object object{{"id", id},
                        {"object", "model"},
                        {"created", served.created},
                        {"owned_by", "chatflow"},
                        {"root", id}};
    if (const ServedModel* model = served.model(id)) {
      object["max_model_len"] = model->context_length();
    }
    return object;
  }

  static std::string models_json(const Served& served) {
    json::array data;
    for (const auto& id : served.model_ids)
      data.push_back(model_object(served, id));
    return json::serialize(json::object{{"object", "list"}, {"data", data}});
  }

  void model_info(const Served& served, const std::string& id) {
    if (std::find(served.model_ids.begin(), served.model_ids.end(), id) == served.model_ids.end()) {
      return respond_error(
          make_error(404, "invalid_request_error", "The model '" + id + "' does not exist",
                     "model_not_found", "model"),
          "/v1/models/{id}");
    }
    respond(Response(200, json::serialize(model_object(served, id))), "/v1/models/{id}");
  }

  static const ServedModel& tokenizer_model(const Served& served, const std::string& id) {
    const ServedModel* model = served.model(id);
    if (!model && !id.empty() && served.models.empty() == false) {
      throw RequestFailure(make_error(404, "invalid_request_error",
                                      "The model '" + id + "' does not exist", "model_not_found",
                                      "model"));
    }
    if (!model) {
      throw RequestFailure(make_error(400, "invalid_request_error",
                                      "the served pipeline has no model with a tokenizer",
                                      "no_tokenizer"));
    }
    return *model;
  }

  void tokenize(const Served& served, const std::string& body) {
    TokenizeRequest request = parse_tokenize_request(body);
    const ServedModel& model = tokenizer_model(served, request.model);
    std::vector<int32_t> tokens = model.tokenize(request.text, request.add_special, false);
    json::array ids;
    for (int32_t token : tokens)
      ids.push_back(token);
    json::object response{{"tokens", ids},
                          {"count", static_cast<int64_t>(tokens.size())},
                          {"max_model_len", model.context_length()}};
    respond(Response(200, json::serialize(response)), "/tokenize");
  }

  void detokenize(const Served& served, const std::string& body) {
    DetokenizeRequest request = parse_detokenize_request(body);
    const ServedModel& model = tokenizer_model(served, request.model);
    std::string text;
    try {
      text = model.detokenize(request.tokens);
    } catch (const std::out_of_range& error) {
      throw RequestFailure(
          make_error(400, "invalid_request_error", error.what(), "invalid_token", "tokens"));
    }
    respond(Response{200, json::serialize(json::object{{"prompt", text}})}, "/detokenize");
  }

  // GET /v1/usage[?tenant=T]: admins see any tenant (or all), others their own.
  void usage(const Served& served, const Identity& caller) {
    if (!served.usage) {
      throw RequestFailure(make_error(404, "invalid_request_error",
                                      "this pipeline keeps no usage ledger (add a quota stage)",
                                      "not_found"));
    }
    std::string tenant = query_value(query_, "tenant");
    if (served.authenticator && !caller.has_role("admin")) {
      if (!tenant.empty() && tenant != caller.tenant) {
        throw RequestFailure(make_error(
            403, "permission_error", "only admins may read another tenant's usage", "forbidden"));
      }
      tenant = caller.tenant;
    }
    respond(Response(200, served.usage->usage_json(tenant)), "/v1/usage");
  }

  // GET /v1/sessions/{id}: the caller's own session (its tenant's).
  void session(const Served& served, const Identity& caller, const std::string& id) {
    if (!served.history) {
      throw RequestFailure(make_error(404, "invalid_request_error",
                                      "this pipeline keeps no session history (add a "
                                      "history_store)",
                                      "not_found"));
    }
    respond(Response(200, served.history->session_json(caller.tenant, id)), "/v1/sessions/{id}");
  }

  // POST /admin/reload: admins rebuild the pipeline from its configuration; answered once the
  // new pipeline serves, or with the configuration's errors (file:line:column) while the old
  // one keeps serving.
  void reload(const Served& served, const Identity& caller, const std::string& endpoint) {
    if (served.authenticator && !caller.has_role("admin")) {
      throw RequestFailure(
          make_error(403, "permission_error", "only admins may reload the pipeline", "forbidden"));
    }
    if (!state_->reloader) {
      throw RequestFailure(make_error(404, "invalid_request_error",
                                      "this server was not started with a reloadable "
                                      "configuration",
                                      "not_found"));
    }
    auto self = shared_from_this();
    state_->in_background([self, endpoint] {
      auto outcome = self->state_->reload();
      net::post(self->stream_.get_executor(), [self, outcome, endpoint] {
        if (self->closed_) return;
        if (!outcome.ok) {
          return self->respond_error(
              make_error(400, "invalid_request_error",
                         "the new configuration was not applied; the old pipeline keeps "
                         "serving:\n" +
                             outcome.error,
                         "invalid_config"),
              endpoint);
        }
        json::array reused;
        for (const auto& name : outcome.reused)
          reused.push_back(json::string(name));
        self->respond(Response(200, json::serialize(json::object{{"reloaded", true},
                                                                 {"pipeline", outcome.pipeline},
                                                                 {"resources_kept", reused}})),
                      endpoint);
      });
    });
  }

  // DELETE /v1/cache: admins correct cached answers (a tenant's conversation, or all of it).
  void forget(const Served& served, const Identity& caller, const std::string& body) {
    if (served.authenticator && !caller.has_role("admin")) {
      throw RequestFailure(
          make_error(403, "permission_error", "only admins may correct caches", "forbidden"));
    }
    CacheCorrection correction = parse_cache_correction(body);
    if (correction.tenant.empty()) correction.tenant = caller.tenant;
    json::object deleted;
    for (CacheAdmin* cache : served.caches) {
      deleted[cache->cache_name()] = static_cast<int64_t>(cache->forget(correction));
    }
    respond(Response(200, json::serialize(json::object{{"deleted", deleted}})), "/v1/cache");
  }

  // --- Generation: a Request through the pipeline, its chunks back through HttpSink. ---
  void start_generation(const std::shared_ptr<const Served>& served, RequestKind kind,
                        const std::string& body, const std::string& endpoint);

  void on_deliver(uint64_t exchange, std::string bytes) {
    if (exchange != exchange_ || !request_ || closed_) return;
    if (!headers_sent_) {
      send(stream_head(*request_));
      headers_sent_ = true;
    }
    send(framed(bytes));
    if (outbox_.size() > kMaxQueuedBytes) {
      request_->cancel(make_error(503, "server_error",
                                  "the client reads the stream too slowly; the request was "
                                  "cancelled",
                                  "slow_client"));
    }
  }

  void on_complete(uint64_t exchange, Outcome outcome);

  void on_readable(beast::error_code error, uint64_t exchange) {
    if (exchange != exchange_ || !request_ || closed_) return;
    if (error == net::error::operation_aborted) return;
    boost::system::error_code status;
    size_t available = stream_.socket().available(status);
    if (!error && !status && available > 0) return;  // a pipelined request: stop watching
    client_gone();
  }

  void client_gone() {
    if (request_) {
      request_->cancel(make_error(499, "client_closed_request", "the client closed the connection",
                                  "client_disconnected"));
    }
    gone_ = true;
    close();
  }

  // --- Writing responses. ---
  std::string common_headers() const {
    std::string head =
        "Server: chatflow\r\nDate: " + http_date() + "\r\nAccess-Control-Allow-Origin: *\r\n";
    return head;
  }

  // Header fields stages set on the request (rate-limit state...), minus any a stage could use
  // to split the response.
  static std::string stage_headers(const HeaderFields& fields) {
    std::string head;
    for (const auto& [name, value] : fields) {
      if (name.find_first_of("\r\n:") != std::string::npos ||
          value.find_first_of("\r\n") != std::string::npos) {
        continue;
      }
      head += name + ": " + value + "\r\n";
    }
    return head;
  }

  std::string stream_head(const Request& request) const {
    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
    head += common_headers();
    head += "X-Request-Id: " + request.id + "\r\n";
    head += stage_headers(request.response_headers());
    if (http10_) {
      head += "Connection: close\r\n\r\n";
    } else {
      head += "Transfer-Encoding: chunked\r\n";
      head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    }
    return head;
  }

  std::string framed(const std::string& bytes) const {
    if (http10_ || bytes.empty()) return bytes;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
    return size + bytes + "\r\n";
  }

  void respond_error(const RequestError& error, const std::string& endpoint) {
    respond(error_response(error), endpoint, &error);
  }

  void write_response(const Response& response, const std::string& request_id) {
    std::string reason(http::obsolete_reason(static_cast<http::status>(response.status)));
    std::string head = "HTTP/1.1 " + std::to_string(response.status) + " " + reason + "\r\n";
    head += common_headers();
    if (!response.content_type.empty()) head += "Content-Type: " + response.content_type + "\r\n";
    head += stage_headers(response.headers);
    if (response.status == 401) head += "WWW-Authenticate: Bearer\r\n";
    if (!request_id.empty()) head += "X-Request-Id: " + request_id + "\r\n";
    if (response.status != 204) {
      head += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
    }
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    send(head + response.body);
  }

  // Writes a whole response that needed no pipeline, and logs it; then reads the next request
  // or closes.
  void respond(const Response& response, const std::string& endpoint,
               const RequestError* error = nullptr) {
    write_response(response, {});
    state_->count_http(endpoint, response.status);
    if (endpoint != "/health" && endpoint != "/metrics") {
      AccessRecord record;
      record.method = method_;
      record.path = path_;
      record.remote = remote_;
      record.status = response.status;
      record.total_ms = static_cast<double>(now_ns() - received_ns_) / 1e6;
      if (error) record.error_code = error->code.empty() ? error->type : error->code;
      state_->access_log->write(record);
    }
    next_request();
  }

  void next_request() {
    if (closed_) return;
    if (keep_alive_ && !lingering_ && !state_->draining) {
      read_header();
    } else {
      close_after_flush_ = true;
      flush();
    }
  }

  void send(std::string bytes) {
    if (closed_) return;
    outbox_ += bytes;
    flush();
  }

  void flush() {
    if (writing_ || closed_) return;
    if (outbox_.empty()) {
      if (close_after_flush_) finish_connection();
      return;
    }
    writing_ = true;
    sending_.swap(outbox_);
    outbox_.clear();
    stream_.expires_after(keep_alive_timeout());
    net::async_write(stream_, net::buffer(sending_),
                     [self = shared_from_this()](beast::error_code error, size_t) {
                       self->writing_ = false;
                       self->sending_.clear();
                       if (error) {
                         if (self->request_) return self->client_gone();
                         return self->close();
                       }
                       self->flush();
                     });
  }

  void finish_connection() {
    if (!lingering_) return close();
    // Stop sending, then drain what the client still sends until it closes or time runs out.
    boost::system::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    discard();
  }

  void discard() {
    discard_buffer_.resize(64 * 1024);
    stream_.async_read_some(net::buffer(discard_buffer_),
                            [self = shared_from_this()](beast::error_code error, size_t) {
                              if (error) return self->close();
                              self->discard();
                            });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    boost::system::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  std::chrono::steady_clock::duration keep_alive_timeout() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(state_->settings.keep_alive_timeout_s));
  }

  beast::tcp_stream stream_;
  std::shared_ptr<HttpServer::State> state_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string remote_;

  std::string outbox_;   // queued while a write is in flight
  std::string sending_;  // the write in flight
  std::string discard_buffer_;
  bool writing_ = false;
  bool reading_body_ = false;
  bool close_after_flush_ = false;
  bool lingering_ = false;
  bool closed_ = false;

  // The exchange (request/response pair) in progress.
  uint64_t exchange_ = 0;
  bool keep_alive_ = true;
  bool http10_ = false;
  std::string method_;
  std::string path_;
  std::string query_;
  HeaderFields headers_;
  std::string endpoint_;
  int64_t received_ns_ = 0;
  std::shared_ptr<Request> request_;
  std::shared_ptr<HttpSink> sink_;
  bool streaming_ = false;
  bool headers_sent_ = false;
  bool gone_ = false;
};

namespace {

class HttpSink final : public Sink {
 public:
  // Who asked, for the access log.
  struct Exchange {
    std::string method;
    std::string path;
    std::string remote;
  };

  HttpSink(std::shared_ptr<Session> session, uint64_t exchange_id,
           std::shared_ptr<const Served> served, std::shared_ptr<AccessLog> access_log, bool stream,
           int64_t received_ns, Exchange exchange)
      : session_(std::move(session)),
        exchange_id_(exchange_id),
        served_(std::move(served)),
        access_log_(std::move(access_log)),
        stream_(stream),
        exchange_(std::move(exchange)) {
    times_.received_ns = received_ns;
  }

  void on_chunk(Request& request, const Chunk& chunk) override {
    int64_t now = now_ns();
    if (!chunk.token_ids.empty() || !chunk.text.empty()) {
      if (times_.first_token_ns == 0) {
        times_.first_token_ns = now;
      } else if (!chunk.token_ids.empty()) {
        served_->metrics->observe_inter_token(static_cast<double>(now - times_.last_token_ns) /
                                              1e9);
      }
      times_.last_token_ns = now;
    }
    if (stream_) {
      // A pipeline with an emitter stage (sse_emit) renders the events itself; without one, the
      // server does, with the same encoder.
      std::string bytes;
      if (!chunk.encoded.empty()) {
        pipeline_encodes_ = true;
        bytes = chunk.encoded;
      } else if (!pipeline_encodes_) {
        bytes = encoder_.encode(request, chunk);
      }
      if (!bytes.empty()) session_->deliver(exchange_id_, std::move(bytes));
    } else {
      text_ += chunk.text;
      logprobs_.insert(logprobs_.end(), chunk.logprobs.begin(), chunk.logprobs.end());
    }
  }

  void on_finish(Request& request) override {
    Outcome outcome;
    // Only a request that ended normally has passed every stage: then its usage is final.
    if (!stream_ && !request.error()) outcome.body = completion_json(request, text_, logprobs_);
    session_->complete(exchange_id_, std::move(outcome));
    session_.reset();  // the request holds this sink: let go of the connection now
  }

  // The connection's last word on the exchange: the status the client got (499: it left).
  void set_status(int status) { status_ = status; }

  // Metrics and the access log read what stages wrote, so they wait until no stage can still be
  // writing (a cancelled request finishes while stages may be busy with it).
  void on_released(const Request& request) override {
    if (status_ == 0) return;  // never answered through this sink
    served_->metrics->observe_finished(request, times_, status_);
    AccessRecord record;
    record.id = request.id;
    record.method = exchange_.method;
    record.path = exchange_.path;
    record.remote = exchange_.remote;
    record.status = status_;
    record.tenant = request.identity.tenant;
    record.user = request.identity.user;
    record.model = request.model;
    record.stream = stream_;
    record.prompt_tokens = request.usage.prompt_tokens;
    record.completion_tokens = request.usage.completion_tokens;
    record.cached_tokens = request.usage.cached_prompt_tokens;
    if (times_.first_token_ns > 0) {
      record.ttft_ms = static_cast<double>(times_.first_token_ns - times_.received_ns) / 1e6;
    }
    int64_t finished = request.finished_ns() > 0 ? request.finished_ns() : now_ns();
    record.total_ms = static_cast<double>(finished - times_.received_ns) / 1e6;
    const auto& error = request.error();
    if (auto reason = request.finish_reason(); reason && !error) {
      record.finish_reason = std::string(to_string(*reason));
    }
    if (error) record.error_code = error->code.empty() ? error->type : error->code;
    record.annotations = request.annotations();
    access_log_->write(record);
  }

 private:
  std::shared_ptr<Session> session_;
  uint64_t exchange_id_;
  std::shared_ptr<const Served> served_;
  std::shared_ptr<AccessLog> access_log_;
  bool stream_;
  Exchange exchange_;
  TokenTimes times_;
  bool pipeline_encodes_ = false;
  SseEncoder encoder_;
  std::string text_;
  std::vector<TokenLogprob> logprobs_;
  int status_ = 0;
};

}  // namespace

void Session::start_generation(const std::shared_ptr<const Served>& served, RequestKind kind,
                               const std::string& body, const std::string& endpoint) {
  endpoint_ = endpoint;
  if (state_->draining) {
    Response response = error_response(make_error(503, "server_error",
                                                  "the server is shutting down; retry elsewhere",
                                                  "server_shutting_down"));
    return respond(std::move(response), endpoint);
  }
  auto request = std::make_shared<Request>();
  parse_completion_request(body, kind, *request, served->model_ids);
  request->id = random_id(kind == RequestKind::chat ? "chatcmpl-" : "cmpl-");
  request->headers = std::move(headers_);
  if (request->session_id.empty()) {
    if (auto session = request->header("x-session-id")) request->session_id = std::string(*session);
  }
  request->created = unix_seconds();
  double timeout = state_->settings.request_timeout_s;
  if (timeout > 0) {
    request->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout));
  }
  sink_ = std::make_shared<HttpSink>(shared_from_this(), exchange_, served, state_->access_log,
                                     request->stream, received_ns_,
                                     HttpSink::Exchange{method_, path_, remote_});
  request->sink = sink_;
  request_ = request;
  streaming_ = request->stream;
  headers_sent_ = false;
  gone_ = false;
  state_->track(request);
  Admission admission = served->pipeline->submit(request);
  if (admission != Admission::accepted) {
    state_->untrack(request);
    request_.reset();
    sink_.reset();
    request->sink.reset();
    // A reload swapped pipelines between our snapshot and the submit: the new one takes it.
    if (admission == Admission::closed && !state_->draining) {
      auto fresh = state_->served_snapshot();
      if (fresh && fresh != served) {
        headers_ = std::move(request->headers);
        return start_generation(fresh, kind, body, endpoint);
      }
    }
    bool full = admission == Admission::full;
    Response response = error_response(
        make_error(503, "server_error",
                   full ? "the server is at its limit of " +
                              std::to_string(served->pipeline->spec().max_in_flight) +
                              " requests in flight; retry after " +
                              std::to_string(state_->settings.retry_after_s) + " s"
                        : "the server is shutting down; retry elsewhere",
                   full ? "server_overloaded" : "server_shutting_down"));
    response.headers.push_back({"Retry-After", std::to_string(state_->settings.retry_after_s)});
    return respond(std::move(response), endpoint);
  }
  // Notice a client that goes away while it waits, and cancel its request.
  stream_.socket().async_wait(tcp::socket::wait_read,
                              [self = shared_from_this(), exchange = exchange_](
                                  beast::error_code error) { self->on_readable(error, exchange); });
  if (timeout > 0) {
    timer_.expires_at(request->deadline);
    timer_.async_wait(
        [self = shared_from_this(), exchange = exchange_, timeout](beast::error_code error) {
          if (error || exchange != self->exchange_ || !self->request_) return;
          char seconds[32];
          std::snprintf(seconds, sizeof seconds, "%g", timeout);
          self->request_->cancel(make_error(504, "timeout",
                                            std::string("the request ran longer than "
                                                        "request_timeout_s (") +
                                                seconds + " s)",
                                            "request_timeout"));
        });
  }
}

void Session::on_complete(uint64_t exchange, Outcome outcome) {
  if (exchange != exchange_ || !request_) return;
  std::shared_ptr<Request> request = std::move(request_);
  request_.reset();
  timer_.cancel();
  state_->untrack(request);
  const auto& error = request->error();
  int status = 200;
  if (gone_) {
    status = 499;
  } else if (closed_) {
    status = error ? error->status : 200;
  } else if (streaming_ && headers_sent_) {
    if (error) send(framed(stream_error_events(*error)));
    if (http10_) {
      keep_alive_ = false;
    } else {
      send("0\r\n\r\n");
    }
  } else if (error) {
    status = error->status;
  } else if (streaming_) {
    // The pipeline ended without a single event (nothing to say): an empty, well-formed stream.
    send(stream_head(*request));
    if (!http10_) send("0\r\n\r\n");
  }

  if (!closed_ && !(streaming_ && headers_sent_) && (error || !streaming_)) {
    // A whole response: an error with its real status, or the non-streaming JSON.
    Response response = error ? error_response(*error) : Response(200, std::move(outcome.body));
    response.headers = request->response_headers();
    bool has_retry_after = false;
    for (const auto& [name, value] : response.headers)
      has_retry_after |= lowercase(name) == "retry-after";
    if (error && error->status == 503 && !has_retry_after) {
      response.headers.push_back({"Retry-After", std::to_string(state_->settings.retry_after_s)});
    }
    write_response(response, request->id);
  }
  state_->count_http(endpoint_, status);
  sink_->set_status(status);
  // The sink goes with the request (its on_released logs it); the pipeline thread may still be
  // returning from on_finish.
  sink_.reset();
  next_request();
}

void HttpServer::State::accept() {
  acceptor.async_accept(net::make_strand(io), [self = shared_from_this()](beast::error_code error,
                                                                          tcp::socket socket) {
    if (error == net::error::operation_aborted || !self->acceptor.is_open()) return;
    if (!error) {
      bool over_limit;
      {
        std::lock_guard lock(self->mutex);
        over_limit = static_cast<int64_t>(self->sessions.size()) >= self->settings.max_connections;
      }
      if (over_limit) {
        boost::system::error_code ignored;
        socket.close(ignored);
      } else {
        auto session = std::make_shared<Session>(std::move(socket), self);
        {
          std::lock_guard lock(self->mutex);
          self->sessions[session.get()] = session;
        }
        session->start();
      }
    }
    self->accept();
  });
}

void HttpServer::State::wait_for_signal() {
  signals->async_wait([self = shared_from_this()](beast::error_code error, int) {
    if (error) return;
    self->begin_shutdown();
    self->wait_for_signal();  // a second signal cancels what is still running
  });
}

void HttpServer::State::begin_shutdown() {
  if (draining.exchange(true)) {
    spdlog::warn("second signal: cancelling the requests still in flight");
    drain_deadline = std::chrono::steady_clock::now();
    return;
  }
  size_t count;
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(mutex);
    count = in_flight.size();
    for (auto& [key, weak] : sessions) {
      if (auto session = weak.lock()) open.push_back(session);
    }
  }
  spdlog::info("shutting down: waiting up to {} s for {} requests in flight",
               settings.shutdown_timeout_s, count);
  boost::system::error_code ignored;
  acceptor.close(ignored);
  for (auto& session : open)
    session->drain();
  drain_deadline = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(settings.shutdown_timeout_s));
  poll_drain();
}

void HttpServer::State::abort_all() {
  draining = true;
  boost::system::error_code ignored;
  acceptor.close(ignored);
  if (signals) signals->cancel(ignored);
  if (hangups) hangups->cancel(ignored);
  drain_timer.cancel();
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(mutex);
    for (auto& [key, weak] : sessions) {
      if (auto session = weak.lock()) open.push_back(session);
    }
  }
  for (auto& session : open)
    session->abort();
  cancel_in_flight();
}

void HttpServer::State::cancel_in_flight() {
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

void HttpServer::State::poll_drain() {
  drain_timer.expires_after(std::chrono::milliseconds(20));
  drain_timer.async_wait([self = shared_from_this()](beast::error_code error) {
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
      self->poll_sessions_closed(std::chrono::steady_clock::now() + std::chrono::seconds(5));
      return;
    }
    if (!self->cancelled_in_flight && std::chrono::steady_clock::now() >= self->drain_deadline) {
      self->cancelled_in_flight = true;
      self->cancel_in_flight();
    }
    self->poll_drain();
  });
}

void HttpServer::State::poll_sessions_closed(std::chrono::steady_clock::time_point give_up) {
  bool closed;
  {
    std::lock_guard lock(mutex);
    closed = sessions.empty();
  }
  if (closed || std::chrono::steady_clock::now() >= give_up) {
    work.reset();
    io.stop();
    return;
  }
  drain_timer.expires_after(std::chrono::milliseconds(10));
  drain_timer.async_wait([self = shared_from_this(), give_up](beast::error_code error) {
    if (!error) self->poll_sessions_closed(give_up);
  });
}

HttpServer::HttpServer(ServerSettings settings)
    : state_(std::make_shared<State>(std::move(settings))) {}

// Pending operations and sinks hold sessions, and sessions hold the state: close everything,
// then run the handlers that remain until the last session is gone, so nothing outlives us.
HttpServer::~HttpServer() {
  net::post(state_->io, [state = state_] { state->abort_all(); });
  state_->work.reset();
  while (true) {
    state_->io.restart();
    state_->io.run_for(std::chrono::milliseconds(10));
    std::lock_guard lock(state_->mutex);
    if (state_->sessions.empty() && state_->in_flight.empty() && state_->io.stopped()) break;
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

void HttpServer::State::install(std::shared_ptr<Pipeline> pipeline) {
  auto fresh = std::make_shared<Served>();
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
  std::shared_ptr<const Served> old;
  {
    std::lock_guard lock(mutex);
    old = std::exchange(served, std::move(fresh));
  }
  // Requests already admitted finish on the old pipeline; it goes once they have.
  if (old) in_background([old] { old->pipeline->drain(); });
}

HttpServer::State::ReloadOutcome HttpServer::State::reload() {
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

void HttpServer::State::in_background(std::function<void()> work) {
  std::lock_guard lock(background_mutex);
  background_running.fetch_add(1, std::memory_order_relaxed);
  background.emplace_back([this, work = std::move(work)] {
    work();
    background_running.fetch_sub(1, std::memory_order_release);
  });
}

void HttpServer::State::join_background() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(background_mutex);
    threads.swap(background);
  }
  for (auto& thread : threads)
    if (thread.joinable()) thread.join();
}

void HttpServer::State::wait_for_hangup() {
  hangups->async_wait([self = shared_from_this()](beast::error_code error, int) {
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
