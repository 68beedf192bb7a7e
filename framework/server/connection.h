// One TCP connection: HTTP/1.1 requests read one after another (keep-alive), each routed
// (routes.h) and answered whole or as a stream of server-sent events. Everything runs on the
// connection's strand, except the public deliver/complete/abort/drain, which post onto it.
//
// connection.cpp reads and writes; connection_routing.cpp decides what answers a request;
// generation_exchange.cpp holds the exchange with the pipeline (its sink, the start of a
// generation and its completion).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "framework/server/forwarded.h"
#include "framework/server/http_response.h"
#include "framework/server/routes.h"
#include "framework/server/server_state.h"

namespace chatflow::server {

namespace beast = boost::beast;
namespace http = beast::http;

// How one exchange ended, as the sink saw it.
struct Outcome {
  std::string body;  // the non-streaming JSON response, when the request succeeded
};

class HttpSink;

// A response given before the body was read, with the error it reports (for the access log).
struct EarlyAnswer {
  Response response;
  std::optional<RequestError> error;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `metrics_only`: accepted on server.metrics_listen, which serves /metrics and /health alone.
  Connection(tcp::socket socket, std::shared_ptr<ServerState> state, bool metrics_only = false);
  ~Connection();

  void start();

  // From sinks, on pipeline threads.
  void deliver(uint64_t exchange, std::string bytes);
  void complete(uint64_t exchange, Outcome outcome);
  // The server is going away now: cancel the request in flight and close.
  void abort();
  // The server is shutting down: close when idle, or after the exchange in flight.
  void drain();
  // When it has waited for its next request since (steady ns), or 0 while it is busy; any
  // thread may ask.
  int64_t idle_since_ns() const { return idle_since_ns_.load(std::memory_order_relaxed); }
  // Closes the connection if it is still waiting for its next request (to make room).
  void close_if_idle();

 private:
  // Reading requests.
  void read_header();
  void on_header(beast::error_code error);
  void on_read_error(beast::error_code error);
  void reject_body(int status, const std::string& message);

  // Routing: what the header decides, then the route's answer once the body is in.
  std::optional<EarlyAnswer> check_before_body(const http::request_header<>& header);
  void reject_early(const EarlyAnswer& answer);
  void reject_early(const RequestError& error, const std::string& endpoint);
  void dispatch();
  void run_on_worker(const Route& route, const std::string& endpoint);
  void reload(const std::string& endpoint);

  // The exchange with the pipeline (generation_exchange.cpp).
  void start_generation(const std::shared_ptr<const ServedPipeline>& served, RequestKind kind,
                        const std::string& body, const std::string& endpoint);
  void watch_request(double timeout);
  void on_deliver(uint64_t exchange, std::string bytes);
  void on_complete(uint64_t exchange, Outcome outcome);
  void on_readable(beast::error_code error, uint64_t exchange);
  void client_gone();

  // Writing responses.
  ExchangeAddresses exchange_addresses() const;
  std::string common_headers() const;
  std::string allowed_origin(std::string_view origin) const;
  std::string stream_head(const Request& request) const;
  std::string framed(const std::string& bytes) const;
  void respond_error(const RequestError& error, const std::string& endpoint);
  void write_response(const Response& response, const std::string& request_id);
  void respond(const Response& response, const std::string& endpoint,
               const RequestError* error = nullptr);
  void next_request();
  void send(std::string bytes);
  void flush();
  void finish_connection();
  void discard();
  void close();
  std::chrono::steady_clock::duration keep_alive_timeout() const;

  // Refuses chunk extensions past a small limit (the parser calls it for every chunk header).
  struct ChunkHeaderCheck {
    void operator()(uint64_t size, beast::string_view extensions, beast::error_code& error);
  };

  beast::tcp_stream stream_;
  std::shared_ptr<ServerState> state_;
  bool metrics_only_;
  ChunkHeaderCheck chunk_header_check_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string remote_;  // the TCP peer, ip:port
  boost::asio::ip::address peer_address_;

  std::string outbox_;   // queued while a write is in flight
  std::string sending_;  // the write in flight
  std::string discard_buffer_;
  size_t discarded_bytes_ = 0;
  bool writing_ = false;
  bool reading_body_ = false;
  bool close_after_flush_ = false;
  bool lingering_ = false;
  bool closed_ = false;
  std::atomic<int64_t> idle_since_ns_{0};

  // The exchange (request/response pair) in progress.
  uint64_t exchange_ = 0;
  bool keep_alive_ = true;
  bool http10_ = false;
  std::string method_;
  std::string path_;
  std::string query_;
  HeaderFields headers_;
  ClientAddress client_;             // who sent this exchange (trusted proxies resolved)
  std::string request_id_;           // the caller's usable X-Request-Id, else empty
  std::string cors_allowed_origin_;  // for this exchange; empty: no CORS headers
  const Route* route_ = nullptr;
  RouteCall call_;
  std::shared_ptr<const ServedPipeline> served_;  // the snapshot this exchange uses
  std::string endpoint_;
  int64_t received_ns_ = 0;
  std::shared_ptr<Request> request_;
  std::shared_ptr<HttpSink> sink_;
  bool streaming_ = false;
  bool headers_sent_ = false;
  bool gone_ = false;
};

}  // namespace chatflow::server
