#include "framework/limits/rate_limiter.h"

#include <algorithm>

namespace chatflow::limits {
namespace {

// Below this many buckets no sweep is worth its time.
constexpr size_t kSmallestSweep = 1024;

}  // namespace

InMemoryRateLimiter::InMemoryRateLimiter(double window_s, size_t max_buckets)
    : window_s_(window_s),
      max_buckets_(std::max<size_t>(max_buckets, 1)),
      next_sweep_size_(std::min(kSmallestSweep, max_buckets_ + 1)) {}

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
  b.limit = limit;
  b.updated = now;
  return b;
}

void InMemoryRateLimiter::sweep_if_due(Clock::time_point now) {
  if (last_sweep_ == Clock::time_point{}) last_sweep_ = now;
  bool window_passed = std::chrono::duration<double>(now - last_sweep_).count() >= window_s_;
  if (buckets_.size() >= next_sweep_size_ || (window_passed && !buckets_.empty())) sweep(now);
}

// Costs one pass over the buckets; it runs when their count has doubled (so at most once per as
// many new buckets as are kept) or a window has passed.
void InMemoryRateLimiter::sweep(Clock::time_point now) {
  std::erase_if(buckets_, [&](const auto& entry) {
    const Bucket& b = entry.second;
    double elapsed = std::chrono::duration<double>(now - b.updated).count();
    return b.level + elapsed * b.limit / window_s_ >= b.limit;
  });
  // Dropping down to three quarters of the bound leaves room for a quarter more new buckets
  // before the next pass.
  if (buckets_.size() > max_buckets_) drop_least_recently_used(max_buckets_ - max_buckets_ / 4);
  last_sweep_ = now;
  next_sweep_size_ = std::min(std::max(kSmallestSweep, 2 * buckets_.size()), max_buckets_ + 1);
}

void InMemoryRateLimiter::drop_least_recently_used(size_t keep) {
  using Entry = decltype(buckets_)::iterator;
  std::vector<Entry> entries;
  entries.reserve(buckets_.size());
  for (auto it = buckets_.begin(); it != buckets_.end(); ++it)
    entries.push_back(it);
  auto dropped = static_cast<std::ptrdiff_t>(buckets_.size() - keep);
  std::nth_element(entries.begin(), entries.begin() + dropped, entries.end(),
                   [](Entry a, Entry b) { return a->second.updated < b->second.updated; });
  for (auto it = entries.begin(); it != entries.begin() + dropped; ++it)
    buckets_.erase(*it);
}

Reservation InMemoryRateLimiter::reserve(const std::vector<Claim>& claims) {
  std::lock_guard lock(mutex_);
  Clock::time_point now = now_();
  sweep_if_due(now);
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
  Clock::time_point now = now_();
  sweep_if_due(now);
  Bucket& b = bucket(name, limit, now);
  b.level = std::min(limit, b.level + amount);
}

size_t InMemoryRateLimiter::bucket_count() const {
  std::lock_guard lock(mutex_);
  return buckets_.size();
}

}  // namespace chatflow::limits
