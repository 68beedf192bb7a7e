#include "framework/upstream/circuit_breaker.h"

namespace chatflow::upstream {

CircuitBreaker::State CircuitBreaker::state(Clock::time_point now) const {
  if (!open_) return State::closed;
  return now - opened_at_ >= settings_.cooldown ? State::half_open : State::open;
}

bool CircuitBreaker::can_admit(Clock::time_point now) const {
  switch (state(now)) {
    case State::closed:
      return true;
    case State::open:
      return false;
    case State::half_open:
      return !trial_in_flight_;
  }
  return false;
}

void CircuitBreaker::admitted(Clock::time_point now) {
  if (state(now) == State::half_open) trial_in_flight_ = true;
}

void CircuitBreaker::record_success() {
  failures_ = 0;
  open_ = false;
  trial_in_flight_ = false;
}

void CircuitBreaker::record_failure(Clock::time_point now) {
  ++failures_;
  // A failed trial opens the breaker again at once; a closed one opens at the threshold.
  if (trial_in_flight_ || (open_ && state(now) == State::half_open) ||
      failures_ >= settings_.failure_threshold) {
    open_ = true;
    opened_at_ = now;
  }
  trial_in_flight_ = false;
}

void CircuitBreaker::record_abandoned() {
  trial_in_flight_ = false;
}

}  // namespace chatflow::upstream
