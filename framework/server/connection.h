// One TCP connection: HTTP/1.1 requests read one after another (keep-alive), each routed
// (routes.h) and answered whole or as a stream of server-sent events. Everything runs on the
// connection's strand, except the public deliver/complete/abort/drain, which post onto it.
//
// connection.cpp reads, routes and writes; generation_exchange.cpp holds the exchange with the
// pipeline (its sink, the start of a generation and its completion).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

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

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<ServerState> state);
  ~Connection();

  void start();

  // From sinks, on pipeline threads.
  void deliver(uint64_t exchange, std::string bytes);
  void complete(uint64_t exchange, Outcome outcome);
  // The server is going away now: cancel the request in flight and close.
  void abort();
  // The server is shutting down: close when idle, or after the exchange in flight.
  void drain();

 private:
  // Reading requests.
  void read_header();
  void on_header(beast::error_code error);
  void on_read_error(beast::error_code error);
  void reject_body(int status, const std::string& message);

  // Routing.
  void handle(http::request<http::string_body> message);
  void dispatch(const Route& route, RouteCall call);
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
  std::string common_headers() const;
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

  beast::tcp_stream stream_;
  std::shared_ptr<ServerState> state_;
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

}  // namespace chatflow::server
