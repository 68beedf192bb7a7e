// The client of an OpenAI-compatible engine with one or more endpoints: Boost.Beast over Asio on
// one thread of its own, a keep-alive pool of connections per endpoint (TLS through OpenSSL for
// https endpoints: SNI, certificate and host name verified unless told otherwise), health checks
// and circuit breakers per endpoint, and the balancer (endpoint_balancer.h) choosing where each
// request goes.
//
// One call is one streamed answer. Until its first output reaches the observer, any failure
// (connect, TLS, a 5xx or 429, an error event, a timeout) is retried on another endpoint, up to
// `retries` more; a pooled connection the engine closed meanwhile is retried once on a fresh one
// without counting. After the first output there is no retry: the observer hears the failure
// and ends the stream with an error. While a call waits on the engine its observer's cancelled()
// is polled; a cancelled call closes its connection at once, which is how the engine learns the
// client left.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/api/request.h"
#include "framework/upstream/endpoint_balancer.h"
#include "framework/upstream/endpoint_url.h"
#include "framework/upstream/sse_reframer.h"

namespace chatflow::upstream {

struct HealthCheckSettings {
  std::string path = "/health";
  std::chrono::milliseconds interval{5000};  // 0: no health checks
  std::chrono::milliseconds timeout{2000};
};

struct UpstreamSettings {
  std::vector<EndpointUrl> endpoints;
  std::string api_key;  // sent as "Authorization: Bearer ..." when not empty
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds first_byte_timeout{60000};  // request sent -> first output
  std::chrono::milliseconds idle_timeout{30000};        // between two reads once streaming
  int retries = 2;
  HealthCheckSettings health;
  CircuitBreaker::Settings breaker;
  size_t max_idle_connections = 64;  // per endpoint
  bool verify_tls = true;
  std::string ca_file;  // empty: the system's trust store
  // One answer's bounds, whatever the engine sends (events without output included): bytes of
  // its body, and time from the request sent to the body's end.
  size_t max_answer_bytes = 16u << 20;
  std::chrono::milliseconds max_answer_time{600000};
};

// How the stream ended well: the finish reason and usage the engine reported, if it did.
struct StreamEnd {
  std::optional<std::string> finish_reason;
  std::optional<Usage> usage;
};

// The caller's side of one call; every method runs on the client's thread, in order, and the
// observer is destroyed on the client's releaser thread (see Impl::release).
class StreamObserver {
 public:
  virtual ~StreamObserver() = default;
  // An event with output; `first` for the first one (from then on there is no failover).
  // `endpoint` is the base URL serving the call. False when the observer has all of the answer
  // it takes (the request's max_tokens) and ended it: the call ends there, its connection is
  // closed so that the engine stops generating, and the observer hears nothing more.
  virtual bool on_output(const StreamEvent& event, bool first, const std::string& endpoint) = 0;
  virtual void on_end(const StreamEnd& end) = 0;
  // The call failed; `after_output` when some output was already passed on.
  virtual void on_failure(const RequestError& error, bool after_output) = 0;
  // Polled while the call runs; true ends it, and the observer hears only on_abandoned().
  virtual bool cancelled() const = 0;
  // The call was given up (cancelled, or the client is stopping): let go at once of what holds
  // the pipeline. The observer itself is destroyed later, on the releaser.
  virtual void on_abandoned() {}
};

struct UpstreamCall {
  std::string path;  // below the endpoint's base path, e.g. /v1/chat/completions
  std::string body;
  std::string affinity_key;                                  // empty: least outstanding
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. traceparent
  std::shared_ptr<StreamObserver> observer;
};

class UpstreamClient {
 public:
  explicit UpstreamClient(UpstreamSettings settings);
  ~UpstreamClient();
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Returns at once; the observer hears the rest.
  void start(UpstreamCall call);

  const UpstreamSettings& settings() const;
  EndpointState endpoint_state(size_t endpoint) const;
  int64_t outstanding() const;

  struct Impl;  // the client's thread, pools and calls; upstream_client.cpp

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace chatflow::upstream
