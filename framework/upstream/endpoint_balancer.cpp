#include "framework/upstream/endpoint_balancer.h"

#include <algorithm>

namespace chatflow::upstream {

uint64_t affinity_score(std::string_view key, size_t endpoint) {
  // FNV-1a over the key, then the endpoint's index mixed in with splitmix64's finaliser, so
  // scores of one key on different endpoints are independent.
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : key) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  hash ^= (static_cast<uint64_t>(endpoint) + 1) * 0x9E3779B97F4A7C15ull;
  hash = (hash ^ (hash >> 30)) * 0xBF58476D1CE4E5B9ull;
  hash = (hash ^ (hash >> 27)) * 0x94D049BB133111EBull;
  return hash ^ (hash >> 31);
}

EndpointBalancer::EndpointBalancer(size_t endpoints, CircuitBreaker::Settings breaker) {
  slots_.reserve(endpoints);
  for (size_t i = 0; i < endpoints; ++i)
    slots_.emplace_back(breaker);
}

std::optional<size_t> EndpointBalancer::acquire(std::string_view affinity_key,
                                                const std::vector<size_t>& excluded,
                                                Clock::time_point now) {
  std::lock_guard lock(mutex_);
  std::optional<size_t> best;
  uint64_t best_score = 0;
  size_t count = slots_.size();
  for (size_t step = 0; step < count; ++step) {
    size_t i = (next_ + step) % count;
    const Slot& slot = slots_[i];
    if (!slot.healthy || !slot.breaker.can_admit(now)) continue;
    if (std::find(excluded.begin(), excluded.end(), i) != excluded.end()) continue;
    if (!affinity_key.empty()) {
      uint64_t score = affinity_score(affinity_key, i);
      if (!best || score > best_score) {
        best = i;
        best_score = score;
      }
    } else if (!best || slot.outstanding < slots_[*best].outstanding) {
      best = i;
    }
  }
  if (!best) return std::nullopt;
  Slot& chosen = slots_[*best];
  chosen.breaker.admitted(now);
  ++chosen.outstanding;
  next_ = (*best + 1) % count;
  return best;
}

void EndpointBalancer::release(size_t endpoint, Outcome outcome, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  Slot& slot = slots_.at(endpoint);
  --slot.outstanding;
  switch (outcome) {
    case Outcome::success:
      slot.breaker.record_success();
      break;
    case Outcome::failure:
      slot.breaker.record_failure(now);
      break;
    case Outcome::abandoned:
      slot.breaker.record_abandoned();
      break;
  }
}

void EndpointBalancer::set_healthy(size_t endpoint, bool healthy) {
  std::lock_guard lock(mutex_);
  slots_.at(endpoint).healthy = healthy;
}

EndpointState EndpointBalancer::state(size_t endpoint, Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  const Slot& slot = slots_.at(endpoint);
  return {slot.healthy, slot.breaker.state(now), slot.breaker.consecutive_failures(),
          slot.outstanding};
}

int64_t EndpointBalancer::total_outstanding() const {
  std::lock_guard lock(mutex_);
  int64_t total = 0;
  for (const auto& slot : slots_)
    total += slot.outstanding;
  return total;
}

}  // namespace chatflow::upstream
