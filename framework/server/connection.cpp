#include "framework/server/connection.h"

#include <algorithm>
#include <sys/socket.h>

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "framework/server/access_log.h"
#include "framework/server/http_framing.h"
#include "framework/server/side_gates.h"

namespace chatflow::server {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
// Chunk extensions carry nothing this server reads; a long one only costs memory and time.
constexpr size_t kMaxChunkExtensionBytes = 1024;
// After refusing a body, how long we keep reading (and discarding) before closing, so the client
// sees our response instead of a connection reset.
constexpr auto kLingerTime = std::chrono::seconds(3);
// ... and how much of it we read at most: enough for a client sending a whole refused body to
// read our answer, bounded for one that sends without end.
constexpr size_t kMaxLingerBytes = 16u << 20;
// How long a TLS client gets to answer our close_notify before the socket is closed anyway.
constexpr auto kTlsShutdownTime = std::chrono::seconds(2);
// One write takes about this much of the backlog.
constexpr size_t kMaxWriteBytes = 1u << 20;
// A keep-alive client's next request is read only while at most this much of its answers waits
// to be written: one that pipelines requests and never reads would otherwise have every answer
// queued, however many it sends.
constexpr size_t kMaxUnwrittenAnswerBytes = 64 * 1024;

std::chrono::steady_clock::duration seconds(double value) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(value));
}

}  // namespace

void Connection::ChunkHeaderCheck::operator()(uint64_t, beast::string_view extensions,
                                              beast::error_code& error) {
  if (extensions.size() > kMaxChunkExtensionBytes) error = http::error::bad_chunk_extension;
}

Connection::Connection(tcp::socket socket, std::shared_ptr<ServerState> state, bool metrics_only,
                       std::shared_ptr<boost::asio::ssl::context> tls)
    : stream_(std::move(socket), std::move(tls)),
      state_(std::move(state)),
      metrics_only_(metrics_only),
      timer_(stream_.get_executor()),
      heartbeat_timer_(stream_.get_executor()),
      buffer_(kMaxHeaderBytes) {
  boost::system::error_code ignored;
  stream_.socket().set_option(tcp::no_delay(true), ignored);
  auto endpoint = stream_.socket().remote_endpoint(ignored);
  peer_address_ = endpoint.address();
  remote_ = endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

Connection::~Connection() {
  if (!closed_ && !slot_handed_over_) state_->release_connection_slot();
  release_anonymous_exchange();
  std::lock_guard lock(state_->mutex);
  state_->connections.erase(this);
}

void Connection::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    if (!self->stream_.is_tls()) return self->read_header();
    // A client that connects and never says hello is pending like one slow with its header.
    self->idle_since_ns_.store(now_ns(), std::memory_order_relaxed);
    self->timer_.expires_after(seconds(self->state_->settings.header_timeout_s));
    self->timer_.async_wait([self](beast::error_code error) {
      if (!error) self->close();
    });
    self->stream_.socket().async_wait(tcp::socket::wait_read, [self](beast::error_code error) {
      if (error || self->closed_) return self->close();
      self->shake_hands();
    });
  });
}

// A TLS connection's first byte is a handshake record (22); a letter is a plain HTTP request
// sent to the HTTPS address by mistake, which gets a plain answer saying so.
void Connection::shake_hands() {
  unsigned char first = 0;
  ssize_t peeked = ::recv(stream_.socket().native_handle(), &first, 1, MSG_PEEK | MSG_DONTWAIT);
  if (peeked == 1 && first >= 'A' && first <= 'Z') {
    timer_.cancel();
    static const std::string body =
        R"({"error":{"message":"this address serves HTTPS; use an https:// URL",)"
        R"("type":"invalid_request_error","param":null,"code":"https_required"}})";
    auto answer = std::make_shared<std::string>(
        "HTTP/1.1 400 Bad Request\r\nServer: chatflow\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    net::async_write(stream_.socket(), net::buffer(*answer),
                     [self = shared_from_this(), answer](beast::error_code, size_t) {
                       self->lingering_ = true;
                       self->finishing_ = true;
                       boost::system::error_code ignored;
                       self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                       self->stream_.expires_after(kLingerTime);
                       self->discard(/*below_tls=*/true);
                     });
    return;
  }
  stream_.expires_after(seconds(state_->settings.header_timeout_s));
  stream_.async_handshake([self = shared_from_this()](beast::error_code error) {
    self->timer_.cancel();
    if (error) return self->close();
    self->read_header();
  });
}

void Connection::deliver(uint64_t exchange, std::string bytes) {
  if (slow_client_.load(std::memory_order_relaxed)) return;
  size_t backlog = posted_bytes_.load(std::memory_order_relaxed) +
                   queued_bytes_.load(std::memory_order_relaxed) + bytes.size();
  if (backlog > static_cast<size_t>(state_->settings.max_stream_backlog_bytes)) {
    if (!slow_client_.exchange(true)) {
      net::post(stream_.get_executor(),
                [self = shared_from_this(), exchange] { self->on_slow_client(exchange); });
    }
    return;
  }
  posted_bytes_.fetch_add(bytes.size(), std::memory_order_relaxed);
  net::post(stream_.get_executor(),
            [self = shared_from_this(), exchange, bytes = std::move(bytes)]() mutable {
              self->posted_bytes_.fetch_sub(bytes.size(), std::memory_order_relaxed);
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

void Connection::close_if_idle() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->idle_since_ns() > 0 && !self->request_ && !self->writing_) self->close();
  });
}

void Connection::hand_over_slot(std::function<void(bool)> next) {
  net::post(stream_.get_executor(), [self = shared_from_this(), next = std::move(next)] {
    if (self->closed_ || self->idle_since_ns() == 0 || self->request_ || self->writing_) {
      self->shedding_claimed_.store(false);
      return next(false);
    }
    self->slot_handed_over_ = true;
    self->close();
    next(true);
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
  cors_allowed_origin_.clear();
  request_id_.clear();
  client_ = ClientAddress{};
  if (state_->draining && !request_) {
    close();
    return;
  }
  parser_.emplace();
  parser_->body_limit(static_cast<uint64_t>(state_->settings.max_body_bytes));
  parser_->header_limit(kMaxHeaderBytes);
  parser_->on_chunk_header(chunk_header_check_);
  if (buffer_.size() > 0) return read_rest_of_header();  // pipelined: the next one is here
  // Idle until the first byte (keep_alive_timeout_s); then the header has header_timeout_s.
  idle_since_ns_.store(now_ns(), std::memory_order_relaxed);
  stream_.expires_after(keep_alive_timeout());
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code error, size_t bytes) {
                            if (error) return self->on_read_error(error);
                            self->buffer_.commit(bytes);
                            self->read_rest_of_header();
                          });
}

void Connection::read_rest_of_header() {
  if (closed_) return;
  if (idle_since_ns_.load(std::memory_order_relaxed) == 0)
    idle_since_ns_.store(now_ns(), std::memory_order_relaxed);
  stream_.expires_after(seconds(state_->settings.header_timeout_s));
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code error, size_t) { self->on_header(error); });
}

void Connection::on_header(beast::error_code error) {
  idle_since_ns_.store(0, std::memory_order_relaxed);
  if (error) return on_read_error(error);
  try {
    route_header();
  } catch (const std::exception& failure) {
    // A bug, not the client's doing: this connection ends, the server goes on.
    spdlog::error("HTTP connection {}: {} {} failed before its body was read: {}", remote_, method_,
                  path_, failure.what());
    close();
  }
}

// What the header alone decides: the route, an early answer, or reading the body.
void Connection::route_header() {
  received_ns_ = now_ns();
  ++exchange_;
  const auto& header = parser_->get();
  method_ = std::string(header.method_string());
  std::tie(path_, query_) = split_target(header.target());
  http10_ = header.version() < 11;
  keep_alive_ = header.keep_alive() && !state_->draining;
  headers_.clear();
  for (const auto& field : header)
    headers_.emplace_back(lowercase(field.name_string()), std::string(field.value()));
  // A proxy may append its own line rather than extend the client's: every line counts.
  client_ = resolve_client(
      state_->trusted_proxies, peer_address_, joined_field_lines(header, "X-Forwarded-For"),
      joined_field_lines(header, "X-Forwarded-Proto"), stream_.is_tls() ? "https" : "http");
  request_id_ = usable_request_id(header["X-Request-Id"]).value_or("");
  if (auto problem = transfer_coding_problem(header)) {
    // Where this request ends is unknown, so nothing after it on the connection can be trusted.
    keep_alive_ = false;
    lingering_ = true;
    bool unsupported = problem->first == 501;
    return respond_error(
        make_error(problem->first, unsupported ? "not_implemented_error" : "invalid_request_error",
                   problem->second, unsupported ? "unsupported_transfer_coding" : "bad_request"),
        "other");
  }
  cors_allowed_origin_ = allowed_origin(header[http::field::origin]);
  call_ = RouteCall{};
  call_.query = query_;
  route_ = find_route(path_, call_.parameter);
  if (route_ && metrics_only_ && route_->pattern != "/metrics" && route_->pattern != "/health")
    route_ = nullptr;
  if (!route_ && !metrics_only_) {
    // The chat page and the dashboard: files without data, so no credentials are asked.
    if (auto page = state_->static_files.answer(method_, path_, headers_)) {
      if (!parser_->is_done()) {
        keep_alive_ = false;
        lingering_ = true;
      }
      return respond(*page, "static");
    }
  }
  if (!route_) {
    return reject_early(make_error(404, "invalid_request_error",
                                   "no route for " + method_ + " " + path_, "not_found"),
                        "other");
  }
  if (auto refusal = check_before_body(header)) return reject_early(*refusal);
  if (!route_->takes_body && !parser_->is_done()) {
    // A body the route never reads is not read into memory (max_body_bytes for every anonymous
    // GET /health otherwise): the answer goes out now, and the connection closes, discarding
    // what still arrives for a few seconds so the client reads the answer.
    keep_alive_ = false;
    lingering_ = true;
    return dispatch();
  }
  if (!admit_anonymous_exchange()) {
    Response busy = error_response(make_error(
        503, "server_error", "too many connections without credentials are open; retry shortly",
        "too_many_anonymous_connections"));
    busy.headers.push_back({"Retry-After", std::to_string(state_->settings.retry_after_s)});
    return reject_early(EarlyAnswer{busy, std::nullopt});
  }
  // curl and others wait (a whole second) for this before sending a body over 1 KiB.
  if (lowercase(header[http::field::expect]) == "100-continue" && !parser_->is_done()) {
    send("HTTP/1.1 100 Continue\r\n\r\n");
  }
  reading_body_ = true;
  stream_.expires_after(seconds(state_->settings.body_timeout_s));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code error, size_t) {
                     self->reading_body_ = false;
                     if (error) return self->on_read_error(error);
                     self->call_.body = std::move(self->parser_->get().body());
                     self->dispatch();
                   });
}

// At most anonymous_connection_share of max_connections may be held by requests without
// credentials that still have a body to read (or are being answered), when the pipeline
// authenticates; the rest is kept for authenticated clients.
bool Connection::admit_anonymous_exchange() {
  bool anonymous = !metrics_only_ && served_ && served_->authenticator && call_.public_path;
  if (!anonymous || parser_->is_done()) return true;
  int64_t limit = state_->anonymous_exchange_limit();
  if (state_->anonymous_exchanges.fetch_add(1, std::memory_order_relaxed) >= limit) {
    state_->anonymous_exchanges.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  anonymous_exchange_ = true;
  return true;
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
  } else if (error == http::error::buffer_overflow) {
    // Only a chunked body fills the buffer (a header hits header_limit first): a chunk-size
    // line that does not end, or the last chunk's trailer fields. Beast parses either only
    // once it is whole, and a trailer field of 64 KiB would make it throw.
    std::string_view pending(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    if (pending.starts_with("\r\n")) pending.remove_prefix(2);
    if (pending.find("\r\n") == std::string_view::npos) {
      reject_body(400, "malformed HTTP request: a chunk extension is longer than " +
                           std::to_string(kMaxChunkExtensionBytes) + " bytes");
    } else {
      reject_body(431, "the trailer fields after the request's chunked body are larger than " +
                           std::to_string(kMaxHeaderBytes) + " bytes");
    }
  } else if (error == http::error::bad_chunk_extension) {
    reject_body(400, "malformed HTTP request: a chunk extension is longer than " +
                         std::to_string(kMaxChunkExtensionBytes) + " bytes");
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

// --- Writing responses. ---

ExchangeAddresses Connection::exchange_addresses() const {
  if (!client_.forwarded) return {remote_, {}, {}};
  return {client_.address, remote_, client_.scheme};
}

std::string Connection::common_headers() const {
  std::string head = "Server: chatflow\r\nDate: " + http_date() + "\r\n";
  if (!cors_allowed_origin_.empty()) {
    head += "Access-Control-Allow-Origin: " + cors_allowed_origin_ + "\r\nVary: Origin\r\n";
  }
  return head;
}

// The Access-Control-Allow-Origin to send for a request from `origin`: the origin itself when
// it is listed, "*" when any is allowed, else empty (no CORS headers).
std::string Connection::allowed_origin(std::string_view origin) const {
  const auto& allowed = state_->settings.cors_origins;
  if (std::find(allowed.begin(), allowed.end(), "*") != allowed.end()) return "*";
  if (origin.empty()) return {};
  if (std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) {
    return std::string(origin);
  }
  return {};
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
  head += "X-Request-Id: " + request.request_id + "\r\n";
  head += stage_headers(request.response_headers());
  if (http10_) {
    head += "Connection: close\r\n\r\n";
  } else {
    head += "Transfer-Encoding: chunked\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  }
  return head;
}

// One piece of a stream: an HTTP/1.1 chunk, or the bytes as they are for HTTP/1.0.
void Connection::send_framed(std::string_view bytes) {
  if (bytes.empty()) return;
  if (http10_) return send(bytes);
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  send(size);
  send(bytes);
  send("\r\n");
}

void Connection::respond_error(const RequestError& error, const std::string& endpoint) {
  respond(error_response(error, wire()), endpoint, &error);
}

void Connection::write_response(const Response& response, const std::string& request_id) {
  std::string reason(http::obsolete_reason(static_cast<http::status>(response.status)));
  std::string head = "HTTP/1.1 " + std::to_string(response.status) + " " + reason + "\r\n";
  head += common_headers();
  if (!response.content_type.empty()) head += "Content-Type: " + response.content_type + "\r\n";
  head += stage_headers(response.headers);
  if (response.status == 401) head += "WWW-Authenticate: Bearer\r\n";
  if (!request_id.empty()) head += "X-Request-Id: " + request_id + "\r\n";
  // 204 and 304 have no body, and a 304 without Content-Length cannot contradict the 200 it
  // stands for. A HEAD answer says how long the GET body would be and leaves the bytes out.
  bool bodiless = response.status == 204 || response.status == 304;
  if (!bodiless) head += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  send(head);
  if (!bodiless && method_ != "HEAD") send(response.body);
}

// Writes a whole response that needed no pipeline, and logs it; then reads the next request or
// closes.
void Connection::respond(const Response& response, const std::string& endpoint,
                         const RequestError* error) {
  // A side call the pipeline's gates saw (embeddings, rerank): what they noted comes with the
  // answer and into the access log, as for a generation.
  std::shared_ptr<Request> gated = std::move(call_.gated);
  if (gated) {
    Response answer = response;
    for (auto& field : gated->response_headers())
      answer.headers.push_back(field);
    write_response(answer, request_id_);
  } else {
    // A caller's id comes back on every answer, so it can find the request in our logs.
    write_response(response, request_id_);
  }
  state_->count_http(endpoint, response.status);
  if (endpoint != "/health" && endpoint != "/metrics") {
    AccessRecord record;
    record.request_id = request_id_;
    record.method = method_;
    record.path = path_;
    auto addresses = exchange_addresses();
    record.remote = addresses.remote;
    record.peer = addresses.peer;
    record.scheme = addresses.scheme;
    record.status = response.status;
    record.total_ms = static_cast<double>(now_ns() - received_ns_) / 1e6;
    if (error) record.error_code = error->code.empty() ? error->type : error->code;
    if (gated) {
      record.id = gated->id;
      record.tenant = gated->identity.tenant;
      record.user = gated->identity.user;
      record.model = gated->model;
      record.prompt_tokens = gated->usage.prompt_tokens;
      record.annotations = gated->annotations();
    }
    state_->access_log->write(record);
  }
  if (gated && state_->tracer && served_) {
    trace_side_call(*gated, *state_->tracer, headers_, served_->pipeline->spec(),
                    TracedExchange{method_, endpoint, path_, exchange_addresses(), response.status,
                                   received_ns_, 0},
                    error);
  }
  // Letting it go settles the gates (a quota's ledger may be a database): not on this thread,
  // unless no worker can take it.
  if (gated) state_->workers.submit([gated = std::move(gated)]() mutable { gated.reset(); });
  next_request();
}

void Connection::next_request() {
  release_anonymous_exchange();
  // An idle connection must not keep a replaced pipeline (and its model) alive.
  served_.reset();
  call_ = RouteCall{};
  route_ = nullptr;
  if (closed_) return;
  if (keep_alive_ && !lingering_ && !state_->draining) {
    if (outbox_.held_bytes() > kMaxUnwrittenAnswerBytes) {
      waiting_for_writes_ = true;  // read on once the client has read enough (flush)
      return;
    }
    read_header();
  } else {
    close_after_flush_ = true;
    flush();
  }
}

void Connection::send(std::string_view bytes) {
  if (closed_) return;
  outbox_.append(bytes);
  queued_bytes_.store(outbox_.held_bytes(), std::memory_order_relaxed);
  flush();
}

void Connection::flush() {
  if (writing_ || closed_) return;
  if (!outbox_.has_queued()) {
    if (close_after_flush_) finish_connection();
    return;
  }
  writing_ = true;
  stream_.expires_after(keep_alive_timeout());
  net::async_write(stream_, outbox_.take(kMaxWriteBytes),
                   [self = shared_from_this()](beast::error_code error, size_t) {
                     self->writing_ = false;
                     self->outbox_.written();
                     self->queued_bytes_.store(self->outbox_.held_bytes(),
                                               std::memory_order_relaxed);
                     if (error) {
                       if (self->request_) return self->client_gone();
                       return self->close();
                     }
                     self->flush();
                     self->read_on_after_writes();
                   });
}

// Reads the next request of a client whose answers had piled up, once most are written.
void Connection::read_on_after_writes() {
  if (!waiting_for_writes_ || closed_ || outbox_.held_bytes() > kMaxUnwrittenAnswerBytes) return;
  waiting_for_writes_ = false;
  next_request();
}

void Connection::finish_connection() {
  if (finishing_) return;
  finishing_ = true;
  // Waiting only for the client to go: as good as idle when a slot is needed.
  idle_since_ns_.store(now_ns(), std::memory_order_relaxed);
  if (!lingering_) {
    if (stream_.is_tls()) return shut_down_tls();
    return close();
  }
  // Stop sending, then drain what the client still sends until it closes or time runs out.
  // (TLS has no half-close; its close_notify follows the drain.)
  if (!stream_.is_tls()) {
    boost::system::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }
  stream_.expires_after(kLingerTime);
  discard();
}

// `below_tls`: the bytes are read from TCP as they are (a plain request on the TLS address).
void Connection::discard(bool below_tls) {
  discard_buffer_.resize(64 * 1024);
  auto next = [self = shared_from_this(), below_tls](beast::error_code error, size_t bytes) {
    if (error) return self->close();
    // A refused client still sending megabytes gets no more of our time: the answer is long
    // on its way.
    self->discarded_bytes_ += bytes;
    if (self->discarded_bytes_ > kMaxLingerBytes) return self->close();
    self->discard(below_tls);
  };
  if (below_tls) return stream_.tcp().async_read_some(net::buffer(discard_buffer_), next);
  stream_.async_read_some(net::buffer(discard_buffer_), next);
}

// A TLS response delimited by the connection's end (HTTP/1.0 streams) is only complete with a
// close_notify; a client that does not answer ours in time is closed anyway.
void Connection::shut_down_tls() {
  stream_.expires_after(kTlsShutdownTime);
  stream_.async_shutdown([self = shared_from_this()](beast::error_code) { self->close(); });
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  timer_.cancel();
  heartbeat_timer_.cancel();
  release_anonymous_exchange();
  if (!slot_handed_over_) state_->release_connection_slot();
  boost::system::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

void Connection::release_anonymous_exchange() {
  if (!anonymous_exchange_) return;
  anonymous_exchange_ = false;
  state_->anonymous_exchanges.fetch_sub(1, std::memory_order_relaxed);
}

std::chrono::steady_clock::duration Connection::keep_alive_timeout() const {
  return seconds(state_->settings.keep_alive_timeout_s);
}

}  // namespace chatflow::server
