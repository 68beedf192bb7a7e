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
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "framework/server/connection_stream.h"
#include "framework/server/forwarded.h"
#include "framework/server/http_response.h"
#include "framework/server/output_queue.h"
#include "framework/server/routes.h"
#include "framework/server/server_state.h"

namespace chatflow::responses {
class ResponseKeeper;
class ResponseWriter;
}  // namespace chatflow::responses

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
  // `tls`: the context of a server.tls address; the connection shakes hands first. The
  // connection holds one of the server's connection slots, given back when it closes.
  Connection(tcp::socket socket, std::shared_ptr<ServerState> state, bool metrics_only = false,
             std::shared_ptr<boost::asio::ssl::context> tls = nullptr);
  ~Connection();

  void start();

  // From sinks, on pipeline threads. Past the slow-client cap the bytes are dropped and the
  // request is cancelled, so a client that does not read cannot make the server hold more.
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
  // Marks the connection as the one to shed for a new client; false when another accept has
  // already claimed it.
  bool claim_for_shedding() { return !shedding_claimed_.exchange(true); }
  // Closes the connection if it is still idle and hands its connection slot to `next` (true),
  // or leaves it open and unclaimed (false). `next` runs on this connection's strand.
  void hand_over_slot(std::function<void(bool)> next);

 private:
  // Reading requests.
  void shake_hands();
  void read_header();
  void read_rest_of_header();
  void on_header(beast::error_code error);
  void route_header();
  bool admit_anonymous_exchange();
  void on_read_error(beast::error_code error);
  void reject_body(int status, const std::string& message);

  // Routing: what the header decides, then the route's answer once the body is in.
  std::optional<EarlyAnswer> check_before_body(const http::request_header<>& header);
  void reject_early(const EarlyAnswer& answer);
  void reject_early(const RequestError& error, const std::string& endpoint);
  void dispatch();
  void run_on_worker(const Route& route, const std::string& endpoint);
  void reload(const std::string& endpoint);

  // A generation whose `model` may name a `models:` entry: waits for its pipeline
  // (model_routing.cpp), then start_generation.
  void route_generation(RequestKind kind, const std::string& endpoint);
  // A side call whose body's `model` names a `models:` entry (embeddings, rerank, tokenize,
  // count_tokens) runs against the entry's pipeline, once loaded (model_routing.cpp).
  void route_side_call(const Route& route, const std::string& endpoint);
  void with_model_pipeline(const std::string& model, const std::string& endpoint,
                           std::function<void(std::shared_ptr<const ServedPipeline>)> loaded);
  // The exchange with the pipeline (generation_exchange.cpp).
  void start_generation(const std::shared_ptr<const ServedPipeline>& served, RequestKind kind,
                        const std::string& body, const std::string& endpoint);
  void parse_responses_on_worker(const std::shared_ptr<const ServedPipeline>& served,
                                 RequestKind kind, const std::string& body,
                                 const std::string& endpoint,
                                 std::shared_ptr<responses::ResponseKeeper> keeper,
                                 const std::optional<std::string>& owner);
  void submit_generation(const std::shared_ptr<const ServedPipeline>& served, RequestKind kind,
                         const std::string& body, const std::string& endpoint,
                         const std::shared_ptr<Request>& request,
                         std::shared_ptr<responses::ResponseWriter> response_writer);
  void watch_request(double timeout);
  void schedule_heartbeat();
  void on_deliver(uint64_t exchange, std::string bytes);
  void on_slow_client(uint64_t exchange);
  void on_complete(uint64_t exchange, Outcome outcome);
  void on_readable(beast::error_code error, uint64_t exchange);
  void client_gone();

  // Writing responses.
  ExchangeAddresses exchange_addresses() const;
  std::string common_headers() const;
  std::string allowed_origin(std::string_view origin) const;
  std::string stream_head(const Request& request) const;
  void send_framed(std::string_view bytes);
  void respond_error(const RequestError& error, const std::string& endpoint);
  // The protocol of the route being answered (OpenAI's before a route is known).
  Wire wire() const { return route_ ? route_->wire : Wire::openai; }
  void write_response(const Response& response, const std::string& request_id);
  void respond(const Response& response, const std::string& endpoint,
               const RequestError* error = nullptr);
  void next_request();
  void read_on_after_writes();
  void send(std::string_view bytes);
  void flush();
  void finish_connection();
  void discard(bool below_tls = false);
  void shut_down_tls();
  void close();
  void release_anonymous_exchange();
  std::chrono::steady_clock::duration keep_alive_timeout() const;

  // Refuses chunk extensions past a small limit (the parser calls it for every chunk header).
  struct ChunkHeaderCheck {
    void operator()(uint64_t size, beast::string_view extensions, beast::error_code& error);
  };

  ConnectionStream stream_;
  std::shared_ptr<ServerState> state_;
  bool metrics_only_;
  ChunkHeaderCheck chunk_header_check_;
  net::steady_timer timer_;
  net::steady_timer heartbeat_timer_;
  // Bounded: a header or a chunked body's trailer must fit whole (Beast parses either only once
  // all of it is in), and a trailer field of 64 KiB would make Beast throw.
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string remote_;  // the TCP peer, ip:port
  boost::asio::ip::address peer_address_;

  OutputQueue outbox_;
  // Bytes handed to deliver() and not yet queued, read by pipeline threads for the cap.
  std::atomic<size_t> posted_bytes_{0};
  std::atomic<size_t> queued_bytes_{0};  // outbox_.held_bytes(), for the same readers
  std::atomic<bool> slow_client_{false};
  std::atomic<bool> shedding_claimed_{false};
  bool slot_handed_over_ = false;
  bool anonymous_exchange_ = false;  // counted in ServerState::anonymous_exchanges
  std::string discard_buffer_;
  size_t discarded_bytes_ = 0;
  bool writing_ = false;
  bool waiting_for_writes_ = false;  // the next request waits for the client to read answers
  bool reading_body_ = false;
  bool close_after_flush_ = false;
  bool finishing_ = false;
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
  int64_t last_stream_write_ns_ = 0;  // for heartbeats
  bool gone_ = false;
};

}  // namespace chatflow::server
