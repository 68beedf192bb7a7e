// Which endpoint a request goes to. Available endpoints are those whose health check passes (or
// has not run yet) and whose circuit breaker admits a request. A request with an affinity key (its
// session, else its user) goes to the same available endpoint every time — rendezvous hashing, so
// an endpoint going away moves only its own keys and they come back when it returns — which
// keeps that engine's prefix cache warm for the conversation. A request without one goes to the
// endpoint with the fewest outstanding requests. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "framework/upstream/circuit_breaker.h"

namespace chatflow::upstream {

struct EndpointState {
  bool healthy = true;
  CircuitBreaker::State breaker = CircuitBreaker::State::closed;
  int consecutive_failures = 0;
  int64_t outstanding = 0;
};

class EndpointBalancer {
 public:
  using Clock = CircuitBreaker::Clock;
  enum class Outcome { success, failure, abandoned };

  EndpointBalancer(size_t endpoints, CircuitBreaker::Settings breaker);

  // The endpoint for a request, not one of `excluded` (tried already); counts it outstanding
  // until release. nullopt when none is available.
  std::optional<size_t> acquire(std::string_view affinity_key, const std::vector<size_t>& excluded,
                                Clock::time_point now);
  void release(size_t endpoint, Outcome outcome, Clock::time_point now);
  void set_healthy(size_t endpoint, bool healthy);

  EndpointState state(size_t endpoint, Clock::time_point now) const;
  int64_t total_outstanding() const;
  size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    explicit Slot(CircuitBreaker::Settings settings) : breaker(settings) {}
    CircuitBreaker breaker;
    bool healthy = true;
    int64_t outstanding = 0;
  };

  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  size_t next_ = 0;  // where ties between equally loaded endpoints start, so they take turns
};

// The rendezvous score of `key` on endpoint `endpoint`: the highest score wins.
uint64_t affinity_score(std::string_view key, size_t endpoint);

}  // namespace chatflow::upstream
