#include "framework/server/connection.h"

#include <boost/json.hpp>

#include "framework/server/access_log.h"

namespace chatflow::server {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
// After refusing a body, how long we keep reading (and discarding) before closing, so the client
// sees our response instead of a connection reset.
constexpr auto kLingerTime = std::chrono::seconds(3);

}  // namespace

Connection::Connection(tcp::socket socket, std::shared_ptr<ServerState> state)
    : stream_(std::move(socket)), state_(std::move(state)), timer_(stream_.get_executor()) {
  boost::system::error_code ignored;
  stream_.socket().set_option(tcp::no_delay(true), ignored);
  auto endpoint = stream_.socket().remote_endpoint(ignored);
  remote_ = endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

Connection::~Connection() {
  std::lock_guard lock(state_->mutex);
  state_->connections.erase(this);
}

void Connection::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
}

void Connection::deliver(uint64_t exchange, std::string bytes) {
  net::post(stream_.get_executor(),
            [self = shared_from_this(), exchange, bytes = std::move(bytes)]() mutable {
              self->on_deliver(exchange, std::move(bytes));
            });
}

void Connection::complete(uint64_t exchange, Outcome outcome) {
  net::post(stream_.get_executor(),
            [self = shared_from_this(), exchange, outcome = std::move(outcome)]() mutable {
              self->on_complete(exchange, std::move(outcome));
            });
}

void Connection::abort() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->request_) return self->client_gone();
    self->close();
  });
}

void Connection::drain() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    self->keep_alive_ = false;
    if (!self->request_ && !self->writing_ && !self->reading_body_) self->close();
  });
}

// --- Reading requests. ---

void Connection::read_header() {
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

void Connection::on_header(beast::error_code error) {
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

void Connection::on_read_error(beast::error_code error) {
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

// Answers `status` and closes, reading and discarding what the client still sends for a while,
// so it reads the answer rather than a reset.
void Connection::reject_body(int status, const std::string& message) {
  keep_alive_ = false;
  lingering_ = true;
  std::string code = status == 413   ? "request_too_large"
                     : status == 431 ? "headers_too_large"
                                     : "bad_request";
  respond_error(make_error(status, "invalid_request_error", message, code), "other");
}

// --- Routing. ---

void Connection::handle(http::request<http::string_body> message) {
  ++exchange_;
  keep_alive_ = message.keep_alive() && !state_->draining;
  http10_ = message.version() < 11;
  method_ = std::string(message.method_string());
  std::string_view target = message.target();
  size_t question = target.find('?');
  path_ = std::string(target.substr(0, question));
  query_ =
      question == std::string_view::npos ? std::string() : std::string(target.substr(question + 1));
  while (path_.size() > 1 && path_.back() == '/')
    path_.pop_back();
  headers_.clear();
  for (const auto& field : message) {
    headers_.emplace_back(lowercase(field.name_string()), std::string(field.value()));
  }

  RouteCall call;
  const Route* route = find_route(path_, call.parameter);
  if (!route) {
    return respond_error(make_error(404, "invalid_request_error",
                                    "no route for " + method_ + " " + path_, "not_found"),
                         "other");
  }
  std::string endpoint(route->pattern);
  std::string allowed(route->method);
  if (message.method() == http::verb::options) {
    Response response(204, "", "");
    response.headers = {{"Access-Control-Allow-Methods", allowed + ", OPTIONS"},
                        {"Access-Control-Allow-Headers",
                         "Authorization, Content-Type, X-Request-Id, OpenAI-Organization, "
                         "OpenAI-Project, X-Stainless-*"},
                        {"Access-Control-Max-Age", "86400"}};
    return respond(response, endpoint);
  }
  if (message.method_string() != allowed) {
    Response response = error_response(make_error(
        405, "invalid_request_error", method_ + " is not allowed on " + path_ + "; use " + allowed,
        "method_not_allowed"));
    response.headers.push_back({"Allow", allowed + ", OPTIONS"});
    return respond(response, endpoint);
  }
  bool bodyless = route->body_optional && message.body().empty();
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
  call.query = query_;
  call.body = std::move(message.body());
  dispatch(*route, std::move(call));
}

void Connection::dispatch(const Route& route, RouteCall call) {
  std::string endpoint(route.pattern);
  auto served = state_->served_snapshot();
  call.served = served.get();
  call.metrics = &state_->metrics;
  call.phase = state_->draining ? ServerPhase::draining
               : served         ? ServerPhase::serving
                                : ServerPhase::loading;
  // Routes outside the pipeline answer only to the credentials the pipeline's auth accepts (the
  // completion routes go through the auth stage itself).
  if (served && served->authenticator && route.access != Access::pipeline &&
      !served->authenticator->is_public(path_)) {
    try {
      call.caller = served->authenticator->authenticate(headers_);
    } catch (const RequestFailure& failure) {
      return respond_error(failure.error(), endpoint);
    }
  }
  if (route.needs_pipeline && !served) {
    Response response = error_response(make_error(
        503, "server_error", "the model is still loading; retry shortly", "model_loading"));
    response.headers.push_back({"Retry-After", "1"});
    return respond(response, endpoint);
  }
  try {
    require_admin(route, call);
    switch (route.kind) {
      case RouteKind::side:
        return respond(route.endpoint(call), endpoint);
      case RouteKind::reload:
        return reload(endpoint);
      case RouteKind::generation:
        return start_generation(served, route.generation, call.body, endpoint);
    }
  } catch (const RequestFailure& failure) {
    return respond_error(failure.error(), endpoint);
  }
}

// POST /admin/reload: admins rebuild the pipeline from its configuration; answered once the new
// pipeline serves, or with the configuration's errors (file:line:column) while the old one
// keeps serving.
void Connection::reload(const std::string& endpoint) {
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
      boost::json::array reused;
      for (const auto& name : outcome.reused)
        reused.push_back(boost::json::string(name));
      self->respond(
          Response(200, boost::json::serialize(boost::json::object{{"reloaded", true},
                                                                   {"pipeline", outcome.pipeline},
                                                                   {"resources_kept", reused}})),
          endpoint);
    });
  });
}

// --- Writing responses. ---

std::string Connection::common_headers() const {
  return "Server: chatflow\r\nDate: " + http_date() + "\r\nAccess-Control-Allow-Origin: *\r\n";
}

namespace {

// Header fields stages set on the request (rate-limit state...), minus any a stage could use to
// split the response.
std::string stage_headers(const HeaderFields& fields) {
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

}  // namespace

std::string Connection::stream_head(const Request& request) const {
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

std::string Connection::framed(const std::string& bytes) const {
  if (http10_ || bytes.empty()) return bytes;
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  return size + bytes + "\r\n";
}

void Connection::respond_error(const RequestError& error, const std::string& endpoint) {
  respond(error_response(error), endpoint, &error);
}

void Connection::write_response(const Response& response, const std::string& request_id) {
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

// Writes a whole response that needed no pipeline, and logs it; then reads the next request or
// closes.
void Connection::respond(const Response& response, const std::string& endpoint,
                         const RequestError* error) {
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

void Connection::next_request() {
  if (closed_) return;
  if (keep_alive_ && !lingering_ && !state_->draining) {
    read_header();
  } else {
    close_after_flush_ = true;
    flush();
  }
}

void Connection::send(std::string bytes) {
  if (closed_) return;
  outbox_ += bytes;
  flush();
}

void Connection::flush() {
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

void Connection::finish_connection() {
  if (!lingering_) return close();
  // Stop sending, then drain what the client still sends until it closes or time runs out.
  boost::system::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(kLingerTime);
  discard();
}

void Connection::discard() {
  discard_buffer_.resize(64 * 1024);
  stream_.async_read_some(net::buffer(discard_buffer_),
                          [self = shared_from_this()](beast::error_code error, size_t) {
                            if (error) return self->close();
                            self->discard();
                          });
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  timer_.cancel();
  boost::system::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

std::chrono::steady_clock::duration Connection::keep_alive_timeout() const {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(state_->settings.keep_alive_timeout_s));
}

}  // namespace chatflow::server
