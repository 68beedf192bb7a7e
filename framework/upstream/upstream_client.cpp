#include "framework/upstream/upstream_client.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "framework/net/asio_tls.h"

namespace chatflow::upstream {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// How often a waiting call looks at its observer's cancelled(): the bound on how long an engine
// keeps generating for a client that left.
constexpr auto kCancelPoll = std::chrono::milliseconds(20);
// An error answer's body is read this far, for its message.
constexpr size_t kMaxErrorBody = 64 * 1024;
// What an answer's status line, header, chunk sizes and trailer may take in a connection's read
// buffer. Beast's field store throws on one field of 64 KiB, and nothing else bounds a chunked
// body's trailer: past this the read fails (buffer_overflow) and the call fails over. The body
// streams through and is not held here.
constexpr size_t kMaxHeadBytes = 32 * 1024;

// One keep-alive connection to an endpoint, plain or TLS.
class Connection {
 public:
  Connection(asio::io_context& io, ssl::context* tls, size_t endpoint) : endpoint_(endpoint) {
    if (tls) {
      tls_.emplace(io, *tls);
    } else {
      plain_.emplace(io);
    }
  }

  beast::tcp_stream& tcp() { return tls_ ? tls_->next_layer() : *plain_; }
  bool is_tls() const { return tls_.has_value(); }
  beast::ssl_stream<beast::tcp_stream>& tls() { return *tls_; }
  size_t endpoint() const { return endpoint_; }
  beast::flat_buffer& buffer() { return buffer_; }

  // Runs `use` with the stream the HTTP messages go over.
  template <class Use>
  void with_stream(Use&& use) {
    if (tls_) {
      use(*tls_);
    } else {
      use(*plain_);
    }
  }

  void close() {
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp().close();
  }

 private:
  size_t endpoint_;
  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
  beast::flat_buffer buffer_{kMaxHeadBytes};
};

bool is_timeout(const beast::error_code& error) {
  return error == beast::error::timeout;
}

// A pooled connection the engine closed while it sat idle fails like this on first use.
bool is_stale_connection(const beast::error_code& error) {
  return error == http::error::end_of_stream || error == asio::error::eof ||
         error == asio::error::connection_reset || error == asio::error::broken_pipe ||
         error == asio::error::connection_aborted;
}

}  // namespace

struct UpstreamClient::Impl : std::enable_shared_from_this<UpstreamClient::Impl> {
  explicit Impl(UpstreamSettings given)
      : settings(std::move(given)),
        work(asio::make_work_guard(io)),
        tls(net::TlsClientOptions{settings.ca_file, {}, {}, !settings.verify_tls}),
        tls_context(net::asio_context(tls)),
        balancer(settings.endpoints.size(), settings.breaker),
        idle(settings.endpoints.size()) {}

  // A fresh connection to `endpoint`, connected (and TLS-handshaken): `done(error, connection)`.
  template <class Done>
  void connect(size_t endpoint, std::chrono::milliseconds timeout, Done done);

  std::unique_ptr<Connection> take_idle(size_t endpoint) {
    auto& pool = idle[endpoint];
    while (!pool.empty()) {
      std::unique_ptr<Connection> connection = std::move(pool.back());
      pool.pop_back();
      if (connection->tcp().socket().is_open()) return connection;
    }
    return nullptr;
  }

  void give_back(std::unique_ptr<Connection> connection) {
    if (stopping || !connection->tcp().socket().is_open()) return;
    auto& pool = idle[connection->endpoint()];
    if (pool.size() >= settings.max_idle_connections) return;
    connection->tcp().expires_never();
    pool.push_back(std::move(connection));
  }

  void schedule_health_check(size_t endpoint, std::chrono::milliseconds delay);
  void check_health(size_t endpoint);

  // Observers are let go of on a thread of their own, not this client's: the last reference to
  // a request runs its release work (a Redis refund, a ledger settle), which must not hold up
  // every other call's stream. Once the releaser has stopped, the caller lets go itself.
  void release(std::shared_ptr<StreamObserver> observer) {
    if (!observer) return;
    {
      std::lock_guard lock(release_mutex);
      if (!releases_stopped) {
        to_release.push_back(std::move(observer));
        release_wake.notify_one();
        return;
      }
    }
    observer.reset();
  }

  // What is queued is still released; then the releaser ends. It can be the releaser that lets
  // go of the last pipeline, and it cannot join itself.
  void stop_releases() {
    {
      std::lock_guard lock(release_mutex);
      releases_stopped = true;
    }
    release_wake.notify_all();
    if (release_thread.get_id() == std::this_thread::get_id()) {
      release_thread.detach();
    } else {
      release_thread.join();
    }
  }

  void run_releases() {
    std::unique_lock lock(release_mutex);
    while (true) {
      release_wake.wait(lock, [&] { return releases_stopped || !to_release.empty(); });
      if (to_release.empty()) return;
      std::shared_ptr<StreamObserver> observer = std::move(to_release.front());
      to_release.pop_front();
      lock.unlock();
      observer.reset();
      lock.lock();
    }
  }

  UpstreamSettings settings;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  net::TlsClientContext tls;  // TLS 1.2+, verified unless tls.verify: false
  ssl::context tls_context;   // the same, as Asio takes it
  EndpointBalancer balancer;
  std::vector<std::vector<std::unique_ptr<Connection>>> idle;  // the client's thread only
  std::vector<std::unique_ptr<asio::steady_timer>> health_timers;
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::mutex release_mutex;
  std::condition_variable release_wake;
  std::deque<std::shared_ptr<StreamObserver>> to_release;
  bool releases_stopped = false;
  std::thread release_thread;
};

template <class Done>
void UpstreamClient::Impl::connect(size_t endpoint, std::chrono::milliseconds timeout, Done done) {
  const EndpointUrl& url = settings.endpoints[endpoint];
  auto connection = std::make_shared<std::unique_ptr<Connection>>(
      std::make_unique<Connection>(io, url.tls ? &tls_context : nullptr, endpoint));
  auto resolver = std::make_shared<tcp::resolver>(io);
  auto deadline = Clock::now() + timeout;
  // Name resolution counts against the same deadline: the resolver itself has none, and a
  // silent DNS server would hold the call for as long as the system's resolver retries.
  auto resolve_timer = std::make_shared<asio::steady_timer>(io, deadline);
  auto resolved = std::make_shared<bool>(false);
  resolve_timer->async_wait([resolver, resolved, done](beast::error_code error) mutable {
    if (error || *resolved) return;
    *resolved = true;
    resolver->cancel();
    done(beast::error::timeout, std::unique_ptr<Connection>());
  });
  resolver->async_resolve(
      url.host, url.port,
      [this, resolver, resolve_timer, resolved, connection, deadline, &url, done](
          beast::error_code error, tcp::resolver::results_type results) mutable {
        if (*resolved) return;  // too late: the call has already failed
        *resolved = true;
        resolve_timer->cancel();
        if (error) return done(error, std::unique_ptr<Connection>());
        Connection& stream = **connection;
        stream.tcp().expires_at(deadline);
        stream.tcp().async_connect(
            results, [this, connection, deadline, &url, done](beast::error_code error,
                                                              const tcp::endpoint&) mutable {
              if (error) return done(error, std::unique_ptr<Connection>());
              Connection& stream = **connection;
              stream.tcp().socket().set_option(tcp::no_delay(true));
              if (!stream.is_tls()) return done(error, std::move(*connection));
              // SNI, and the certificate must name the host we asked for.
              try {
                tls.prepare(stream.tls().native_handle(), url.host);
              } catch (const net::TlsError&) {
                return done(asio::error::invalid_argument, std::unique_ptr<Connection>());
              }
              stream.tcp().expires_at(deadline);
              stream.tls().async_handshake(ssl::stream_base::client,
                                           [connection, done](beast::error_code error) mutable {
                                             if (error)
                                               return done(error, std::unique_ptr<Connection>());
                                             done(error, std::move(*connection));
                                           });
            });
      });
}

namespace {

// One call: endpoint after endpoint until one streams, then the stream to its end. Lives on the
// client's thread; handlers hold it through shared_from_this.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<UpstreamClient::Impl> client, UpstreamCall call)
      : client_(std::move(client)), call_(std::move(call)), cancel_timer_(client_->io) {}

  void begin() {
    watch_cancel();
    attempt();
  }

 private:
  enum class Failure { connect, timeout, status, stream };

  const UpstreamSettings& settings() const { return client_->settings; }

  void watch_cancel() {
    cancel_timer_.expires_after(kCancelPoll);
    cancel_timer_.async_wait([self = shared_from_this()](beast::error_code error) {
      if (error || self->done_) return;
      if (self->draining_) {
        // The answer is delivered, the body's end still awaited: at shutdown, closing the
        // connection ends that read instead of waiting out idle_ms.
        if (self->client_->stopping && self->connection_) return self->connection_->close();
        return self->watch_cancel();
      }
      if (!self->call_.observer) return;
      if (self->call_.observer->cancelled() || self->client_->stopping) return self->abandon();
      self->watch_cancel();
    });
  }

  // The client left: closing the connection is what tells the engine.
  void abandon() {
    if (done_) return;
    done_ = true;
    // What holds the pipeline goes now; only the request waits for the releaser.
    if (call_.observer) call_.observer->on_abandoned();
    // Closed, not released: a read or write is still pending on it and completes (aborted) into
    // its buffers; the exchange, kept alive by that handler, frees it afterwards.
    if (connection_) connection_->close();
    if (endpoint_)
      client_->balancer.release(*endpoint_, EndpointBalancer::Outcome::abandoned, Clock::now());
    endpoint_.reset();
    finish();
  }

  void finish() {
    done_ = true;
    cancel_timer_.cancel();
    client_->release(std::move(call_.observer));  // lets go of the request
  }

  void attempt() {
    if (done_) return;
    if (call_.observer->cancelled()) return abandon();
    endpoint_ = client_->balancer.acquire(call_.affinity_key, tried_, Clock::now());
    if (!endpoint_) {
      if (tried_.empty()) {
        return fail(RequestError{503,
                                 "server_error",
                                 "no healthy upstream endpoint: every endpoint is failing its "
                                 "health check or has its circuit breaker open",
                                 "no_healthy_upstream",
                                 {}});
      }
      return fail(last_error_);
    }
    tried_.push_back(*endpoint_);
    stale_retry_left_ = true;
    reframer_ = SseReframer();
    end_ = StreamEnd();
    pending_.reset();
    error_body_.clear();
    connection_ = client_->take_idle(*endpoint_);
    reused_ = connection_ != nullptr;
    if (connection_) return send();
    connect_fresh();
  }

  void connect_fresh() {
    connection_.reset();
    client_->connect(*endpoint_, settings().connect_timeout,
                     [self = shared_from_this(), endpoint = *endpoint_](
                         beast::error_code error, std::unique_ptr<Connection> connection) {
                       if (self->done_ || self->endpoint_ != endpoint) {
                         if (connection) connection->close();
                         return;
                       }
                       if (error) {
                         return self->endpoint_failed(
                             is_timeout(error) ? Failure::timeout : Failure::connect,
                             is_timeout(error)
                                 ? "no connection within connect_ms (" +
                                       std::to_string(self->settings().connect_timeout.count()) +
                                       " ms)"
                                 : "could not connect: " + error.message());
                       }
                       self->connection_ = std::move(connection);
                       self->reused_ = false;
                       self->send();
                     });
  }

  void send() {
    const EndpointUrl& url = settings().endpoints[*endpoint_];
    message_ = {};
    message_.method(http::verb::post);
    message_.target(url.base_path + call_.path);
    message_.version(11);
    message_.set(http::field::host, url.host_header());
    message_.set(http::field::user_agent, "chatflow-upstream");
    message_.set(http::field::content_type, "application/json");
    message_.set(http::field::accept, "text/event-stream");
    if (!settings().api_key.empty())
      message_.set(http::field::authorization, "Bearer " + settings().api_key);
    for (const auto& [name, value] : call_.headers)
      message_.set(name, value);
    message_.body() = call_.body;
    message_.prepare_payload();
    first_output_deadline_ = Clock::now() + settings().first_byte_timeout;
    answer_deadline_ = Clock::now() + settings().max_answer_time;
    answer_bytes_ = 0;
    connection_->tcp().expires_at(std::min(first_output_deadline_, answer_deadline_));
    connection_->with_stream([&](auto& stream) {
      http::async_write(stream, message_,
                        [self = shared_from_this()](beast::error_code error, size_t) {
                          if (self->done_) return;
                          if (error) return self->transport_failed(error, "sending the request");
                          self->read_header();
                        });
    });
  }

  void read_header() {
    parser_.emplace();
    parser_->body_limit(boost::none);
    connection_->with_stream([&](auto& stream) {
      http::async_read_header(stream, connection_->buffer(), *parser_,
                              [self = shared_from_this()](beast::error_code error, size_t) {
                                if (self->done_) return;
                                if (error)
                                  return self->transport_failed(error, "waiting for the answer");
                                self->status_ = static_cast<int>(self->parser_->get().result_int());
                                if (!self->parser_->is_done()) return self->read_body();
                                // An answer without a body: an error status, or no stream at all.
                                if (self->status_ != 200) return self->status_failed();
                                self->stream_failed("the engine answered without a stream");
                              });
    });
  }

  void read_body() {
    auto& body = parser_->get().body();
    body.data = body_buffer_.data();
    body.size = body_buffer_.size();
    connection_->tcp().expires_at(
        std::min(output_started_ ? Clock::now() + settings().idle_timeout : first_output_deadline_,
                 answer_deadline_));
    connection_->with_stream([&](auto& stream) {
      http::async_read_some(
          stream, connection_->buffer(), *parser_,
          [self = shared_from_this()](beast::error_code error, size_t) { self->on_body(error); });
    });
  }

  void on_body(beast::error_code error) {
    if (done_ && !draining_) return;
    if (error == http::error::need_buffer) error = {};
    size_t bytes = body_buffer_.size() - parser_->get().body().size;
    if (draining_) {
      // The answer was delivered; what is left is the body's end, read so the connection can
      // serve the next call.
      if (error) {
        connection_->close();
        connection_.reset();
      } else if (parser_->is_done()) {
        release_connection();
      } else {
        return read_body();
      }
      return finish();
    }
    answer_bytes_ += bytes;
    if (answer_bytes_ > settings().max_answer_bytes) {
      return stream_failed("the answer passed max_answer_bytes (" +
                           std::to_string(settings().max_answer_bytes) + " bytes)");
    }
    if (bytes > 0 && status_ == 200) {
      for (StreamEvent& event : reframer_.push(std::string_view(body_buffer_.data(), bytes))) {
        if (!take(event)) return;
      }
      if (reframer_.ended()) return ended_well();
      // With an error, transport_failed decides whether what came is delivered or retried.
      if (!error && !deliver_pending()) return;
    } else if (bytes > 0 && error_body_.size() < kMaxErrorBody) {
      error_body_.append(body_buffer_.data(), std::min(bytes, kMaxErrorBody - error_body_.size()));
    }
    if (error) return transport_failed(error, "reading the answer");
    if (parser_->is_done()) {
      if (status_ != 200) return status_failed();
      // The body ended without [DONE]: an answer that says how it finished is whole.
      if (end_.finish_reason) return ended_well();
      return stream_failed("the engine ended the stream before finishing the answer");
    }
    read_body();
  }

  // One event; false when it ended the call.
  bool take(StreamEvent& event) {
    if (event.kind == StreamEvent::Kind::error) {
      stream_failed("the engine reported an error: " + event.error);
      return false;
    }
    if (event.kind == StreamEvent::Kind::done) return true;
    if (event.finish_reason) end_.finish_reason = event.finish_reason;
    if (event.usage) end_.usage = event.usage;
    if (!event.has_output()) return true;
    // Deltas of plain content that arrived in one read go on as one: the same text, with one
    // pass through the pipeline instead of one per token when the engine is ahead of us.
    bool plain = event.reasoning.empty() && event.tool_calls.empty();
    if (pending_ && pending_plain_ && plain) {
      pending_->content += event.content;
      pending_->pieces += event.pieces;
      return true;
    }
    if (!deliver_pending()) return false;
    pending_ = std::move(event);
    pending_plain_ = plain;
    return true;
  }

  // False when the observer ended the call, having all of the answer it takes.
  bool deliver_pending() {
    if (!pending_) return true;
    StreamEvent event = std::move(*pending_);
    pending_.reset();
    bool first = !output_started_;
    output_started_ = true;
    if (call_.observer->on_output(event, first, settings().endpoints[*endpoint_].text)) return true;
    ended_early();
    return false;
  }

  // The observer took all it wants (the request's max_tokens): the answer ended well for the
  // endpoint, and closing the connection is what stops the engine generating.
  void ended_early() {
    client_->balancer.release(*endpoint_, EndpointBalancer::Outcome::success, Clock::now());
    endpoint_.reset();
    if (connection_) connection_->close();
    connection_.reset();
    finish();
  }

  void ended_well() {
    if (!deliver_pending()) return;
    call_.observer->on_end(end_);
    client_->balancer.release(*endpoint_, EndpointBalancer::Outcome::success, Clock::now());
    endpoint_.reset();
    client_->release(std::move(call_.observer));
    if (parser_->is_done()) {
      release_connection();
      return finish();
    }
    draining_ = true;
    read_body();
  }

  void release_connection() {
    if (connection_ && parser_->keep_alive()) {
      client_->give_back(std::move(connection_));
    } else if (connection_) {
      connection_->close();
    }
    connection_.reset();
  }

  void transport_failed(const beast::error_code& error, const std::string& doing) {
    if (reused_ && stale_retry_left_ && !output_started_ && status_ == 0 &&
        is_stale_connection(error)) {
      // The engine closed this pooled connection while it was idle: not the endpoint's fault.
      stale_retry_left_ = false;
      reused_ = false;
      parser_.reset();
      return connect_fresh();
    }
    if (is_timeout(error) && Clock::now() >= answer_deadline_) {
      return endpoint_failed(Failure::timeout,
                             "the answer took longer than max_answer_ms (" +
                                 std::to_string(settings().max_answer_time.count()) + " ms)");
    }
    if (is_timeout(error)) {
      bool waiting = !output_started_;
      std::string limit =
          waiting ? "first_byte_ms (" + std::to_string(settings().first_byte_timeout.count())
                  : "idle_ms (" + std::to_string(settings().idle_timeout.count());
      return endpoint_failed(
          Failure::timeout,
          std::string(waiting ? "no output" : "no further output") + " within " + limit + " ms)");
    }
    if (error == http::error::buffer_overflow || error == http::error::header_limit) {
      return endpoint_failed(Failure::stream, doing + ": its header or trailer is longer than " +
                                                  std::to_string(kMaxHeadBytes) + " bytes");
    }
    endpoint_failed(Failure::stream, doing + ": " + error.message());
  }

  void status_failed() {
    std::string message = error_message_of(error_body_);
    // The engine refused the request itself: another endpoint would refuse it too, and the
    // client can fix it.
    if (status_ == 400 || status_ == 413 || status_ == 422) {
      client_->balancer.release(*endpoint_, EndpointBalancer::Outcome::success, Clock::now());
      endpoint_.reset();
      release_connection();
      return report(RequestError{400,
                                 "invalid_request_error",
                                 "the upstream engine refused the request: " + message,
                                 "upstream_rejected",
                                 {}});
    }
    endpoint_failed(Failure::status, "answered HTTP " + std::to_string(status_) + ": " + message);
  }

  void stream_failed(const std::string& why) { endpoint_failed(Failure::stream, why); }

  void endpoint_failed(Failure failure, const std::string& why) {
    // Output the client has not seen yet can still be retried elsewhere; after the first
    // delivery, the client gets all that came before the error.
    if (output_started_ && !deliver_pending()) return;
    pending_.reset();
    const std::string& url = settings().endpoints[*endpoint_].text;
    client_->balancer.release(*endpoint_, EndpointBalancer::Outcome::failure, Clock::now());
    endpoint_.reset();
    if (connection_) connection_->close();
    connection_.reset();
    parser_.reset();
    status_ = 0;
    bool timeout = failure == Failure::timeout;
    last_error_ = RequestError{timeout ? 504 : 502,
                               "server_error",
                               "upstream " + url + ": " + why,
                               timeout ? "upstream_timeout" : "upstream_error",
                               {}};
    if (!output_started_ && static_cast<int>(tried_.size()) <= settings().retries) return attempt();
    fail(last_error_);
  }

  void fail(const RequestError& error) {
    if (endpoint_) {
      client_->balancer.release(*endpoint_, EndpointBalancer::Outcome::failure, Clock::now());
      endpoint_.reset();
    }
    report(error);
  }

  void report(const RequestError& error) {
    if (connection_) connection_->close();
    connection_.reset();
    call_.observer->on_failure(error, output_started_);
    finish();
  }

  std::shared_ptr<UpstreamClient::Impl> client_;
  UpstreamCall call_;
  asio::steady_timer cancel_timer_;
  std::vector<size_t> tried_;
  std::optional<size_t> endpoint_;
  std::unique_ptr<Connection> connection_;
  bool reused_ = false;  // the connection came from the pool
  bool stale_retry_left_ = true;
  http::request<http::string_body> message_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::array<char, 16384> body_buffer_{};
  int status_ = 0;
  std::string error_body_;
  SseReframer reframer_;
  StreamEnd end_;
  std::optional<StreamEvent> pending_;  // output of the current read not yet delivered
  bool pending_plain_ = false;
  Clock::time_point first_output_deadline_{};
  Clock::time_point answer_deadline_ = Clock::time_point::max();
  size_t answer_bytes_ = 0;  // of the current attempt's body
  bool output_started_ = false;
  bool done_ = false;
  bool draining_ = false;
  RequestError last_error_;
};

// GET health_path on a fresh connection: 200 is healthy, anything else (or no answer in time)
// is not.
class HealthProbe : public std::enable_shared_from_this<HealthProbe> {
 public:
  HealthProbe(std::shared_ptr<UpstreamClient::Impl> client, size_t endpoint)
      : client_(std::move(client)), endpoint_(endpoint) {}

  void run() {
    const HealthCheckSettings& health = client_->settings.health;
    client_->connect(endpoint_, client_->settings.connect_timeout,
                     [self = shared_from_this(), &health](beast::error_code error,
                                                          std::unique_ptr<Connection> connection) {
                       if (error) return self->conclude(false);
                       self->connection_ = std::move(connection);
                       self->request(health);
                     });
  }

 private:
  void request(const HealthCheckSettings& health) {
    const EndpointUrl& url = client_->settings.endpoints[endpoint_];
    message_.method(http::verb::get);
    message_.target(url.base_path + health.path);
    message_.version(11);
    message_.set(http::field::host, url.host_header());
    message_.set(http::field::user_agent, "chatflow-upstream-health");
    message_.set(http::field::connection, "close");
    if (!client_->settings.api_key.empty())
      message_.set(http::field::authorization, "Bearer " + client_->settings.api_key);
    parser_.body_limit(kMaxErrorBody);
    connection_->tcp().expires_after(health.timeout);
    connection_->with_stream([&](auto& stream) {
      http::async_write(
          stream, message_, [self = shared_from_this()](beast::error_code error, size_t) {
            if (error) return self->conclude(false);
            self->connection_->with_stream([&](auto& stream) {
              http::async_read(stream, self->connection_->buffer(), self->parser_,
                               [self](beast::error_code error, size_t) {
                                 self->conclude(!error && self->parser_.get().result_int() == 200);
                               });
            });
          });
    });
  }

  void conclude(bool healthy) {
    if (connection_) connection_->close();
    client_->balancer.set_healthy(endpoint_, healthy);
    if (!healthy) {
      for (auto& idle : client_->idle[endpoint_])
        idle->close();
      client_->idle[endpoint_].clear();
    }
    client_->schedule_health_check(endpoint_, client_->settings.health.interval);
  }

  std::shared_ptr<UpstreamClient::Impl> client_;
  size_t endpoint_;
  std::unique_ptr<Connection> connection_;
  http::request<http::empty_body> message_;
  http::response_parser<http::string_body> parser_;
};

}  // namespace

void UpstreamClient::Impl::schedule_health_check(size_t endpoint, std::chrono::milliseconds delay) {
  if (stopping) return;
  auto& timer = *health_timers[endpoint];
  timer.expires_after(delay);
  timer.async_wait([weak = weak_from_this(), endpoint](beast::error_code error) {
    auto self = weak.lock();
    if (error || !self || self->stopping) return;
    std::make_shared<HealthProbe>(self, endpoint)->run();
  });
}

UpstreamClient::UpstreamClient(UpstreamSettings settings)
    : impl_(std::make_shared<Impl>(std::move(settings))) {
  for (size_t i = 0; i < impl_->settings.endpoints.size(); ++i)
    impl_->health_timers.push_back(std::make_unique<asio::steady_timer>(impl_->io));
  if (impl_->settings.health.interval.count() > 0) {
    for (size_t i = 0; i < impl_->settings.endpoints.size(); ++i)
      impl_->schedule_health_check(i, std::chrono::milliseconds(0));
  }
  impl_->release_thread = std::thread([impl = impl_] { impl->run_releases(); });
  try {
    impl_->thread = std::thread([impl = impl_] {
      // A handler that throws must not end the process: log it and keep serving the other calls.
      for (;;) {
        try {
          impl->io.run();
          return;
        } catch (const std::exception& error) {
          std::fprintf(stderr, "chatflow: upstream client: %s\n", error.what());
        }
      }
    });
  } catch (...) {
    impl_->stop_releases();  // no thread left waiting for ever
    throw;
  }
}

UpstreamClient::~UpstreamClient() {
  impl_->stopping = true;
  asio::post(impl_->io, [impl = impl_.get()] {
    for (auto& timer : impl->health_timers)
      timer->cancel();
    for (auto& pool : impl->idle) {
      for (auto& connection : pool)
        connection->close();
      pool.clear();
    }
    impl->work.reset();
  });
  // Calls still running see `stopping` at their next cancel poll and close their connections.
  // The last owner of a pipeline can be a request released on this client's own thread (or on
  // its releaser, below): that thread cannot join itself, and it ends once its work is gone
  // (the lambda holds impl_).
  if (impl_->thread.get_id() == std::this_thread::get_id()) {
    impl_->thread.detach();
  } else {
    impl_->thread.join();
  }
  impl_->stop_releases();
}

void UpstreamClient::start(UpstreamCall call) {
  asio::post(impl_->io, [impl = impl_, call = std::move(call)]() mutable {
    std::make_shared<Exchange>(impl, std::move(call))->begin();
  });
}

const UpstreamSettings& UpstreamClient::settings() const {
  return impl_->settings;
}

EndpointState UpstreamClient::endpoint_state(size_t endpoint) const {
  return impl_->balancer.state(endpoint, Clock::now());
}

int64_t UpstreamClient::outstanding() const {
  return impl_->balancer.total_outstanding();
}

}  // namespace chatflow::upstream
