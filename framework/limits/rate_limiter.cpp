#include "framework/limits/rate_limiter.h"

#include <algorithm>

namespace chatflow::limits {

InMemoryRateLimiter::InMemoryRateLimiter(double window_s) : window_s_(window_s) {}

InMemoryRateLimiter::Bucket& InMemoryRateLimiter::bucket(const std::string& name, double limit,
                                                         Clock::time_point now) {
  auto [it, created] = buckets_.try_emplace(name);
  Bucket& b = it->second;
  if (created) {
    b.level = limit;  // a new bucket starts full
  } else {
    double elapsed = std::chrono::duration<double>(now - b.updated).count();
    b.level = std::min(limit, b.level + elapsed * limit / window_s_);
  }
  b.updated = now;
  return b;
}

Reservation InMemoryRateLimiter::reserve(const std::vector<Claim>& claims) {
  std::lock_guard lock(mutex_);
  Clock::time_point now = now_();
  Reservation result;
  result.granted = true;
  std::vector<Bucket*> touched;
  for (const auto& claim : claims) {
    if (claim.limit <= 0) {
      touched.push_back(nullptr);
      continue;
    }
    Bucket& b = bucket(claim.bucket, claim.limit, now);
    touched.push_back(&b);
    if (claim.amount > claim.limit) {
      result.granted = false;
      result.never = true;
    } else if (b.level < claim.amount) {
      result.granted = false;
      double rate = claim.limit / window_s_;
      result.retry_after_s = std::max(result.retry_after_s, (claim.amount - b.level) / rate);
    }
  }
  for (size_t i = 0; i < claims.size(); ++i) {
    const Claim& claim = claims[i];
    BucketState state;
    state.limit = claim.limit;
    if (Bucket* b = touched[i]) {
      if (result.granted) b->level -= claim.amount;
      state.remaining = std::max(0.0, b->level);
      state.seconds_to_full = (claim.limit - b->level) * window_s_ / claim.limit;
    }
    result.states.push_back(state);
  }
  return result;
}

void InMemoryRateLimiter::refund(const std::string& name, double limit, double amount) {
  if (limit <= 0 || amount == 0) return;  // a negative amount takes more (the prompt grew)
  std::lock_guard lock(mutex_);
  Bucket& b = bucket(name, limit, now_());
  b.level = std::min(limit, b.level + amount);
}

}  // namespace chatflow::limits
