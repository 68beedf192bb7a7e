// One endpoint's circuit breaker: after `failure_threshold` failures in a row the endpoint is
// left alone (open) for `cooldown`; then one trial request may go (half-open): its success
// closes the breaker, its failure opens it for another cool-down. Requests that neither
// succeeded nor failed (the client cancelled) leave the count as it was. Not thread-safe: the
// balancer holds it under its lock.
#pragma once

#include <chrono>

namespace chatflow::upstream {

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  struct Settings {
    int failure_threshold = 5;
    std::chrono::milliseconds cooldown{10000};
  };
  enum class State { closed, open, half_open };

  explicit CircuitBreaker(Settings settings) : settings_(settings) {}

  State state(Clock::time_point now) const;
  // Whether a request may go to the endpoint now (half-open: while no trial is under way).
  bool can_admit(Clock::time_point now) const;
  // A request went: in half-open it is the trial.
  void admitted(Clock::time_point now);
  void record_success();
  void record_failure(Clock::time_point now);
  // The request ended without telling (cancelled): a trial may go again.
  void record_abandoned();

  int consecutive_failures() const { return failures_; }

 private:
  Settings settings_;
  int failures_ = 0;
  bool open_ = false;
  Clock::time_point opened_at_{};
  bool trial_in_flight_ = false;
};

}  // namespace chatflow::upstream
