// Token-bucket rate limits for requests and tokens per window, behind an interface so a shared
// backend (Redis, for several replicas) can replace the in-memory one without touching stages.
//
// A bucket holds up to `limit` units and refills continuously at limit / window. A reservation
// takes from every bucket it names, all or nothing; a settlement gives back what was reserved
// and not used (a request reserves its max_tokens and usually generates fewer).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace chatflow::limits {

struct Claim {
  std::string bucket;  // e.g. "tenant:acme:requests"
  double limit = 0;    // units per window; <= 0: unlimited (not counted)
  double amount = 0;   // units this request takes
};

// A bucket's state after a reservation, for the x-ratelimit-* headers.
struct BucketState {
  double limit = 0;
  double remaining = 0;
  double seconds_to_full = 0;
};

struct Reservation {
  bool granted = false;
  double retry_after_s = 0;         // when not granted: until the scarcest bucket has enough
  bool never = false;               // an amount above a bucket's whole limit: waiting cannot help
  std::vector<BucketState> states;  // one per claim, in order
};

class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  virtual Reservation reserve(const std::vector<Claim>& claims) = 0;
  // Returns `amount` units to `bucket` (never above its limit).
  virtual void refund(const std::string& bucket, double limit, double amount) = 0;
  // Returns each claim's amount to its bucket; a shared backend does it in one round trip.
  virtual void refund(const std::vector<Claim>& claims) {
    for (const Claim& claim : claims)
      refund(claim.bucket, claim.limit, claim.amount);
  }
};

// The limiter's store could not be reached or did not answer in time; what the request then
// gets (pass or 503) is the stage's policy.
class LimiterUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One process's buckets, in memory. A bucket that has refilled to its limit is the same as no
// bucket (a new one starts full), so such buckets are dropped: whenever the count has doubled
// since the last sweep, and once per window. Distinct callers (per-address buckets) thus cost
// memory only while their buckets are being drained. Past `max_buckets` the least recently used
// are dropped too (each then starts full again when its caller comes back).
class InMemoryRateLimiter final : public RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kDefaultMaxBuckets = 1'000'000;
  explicit InMemoryRateLimiter(double window_s, size_t max_buckets = kDefaultMaxBuckets);

  Reservation reserve(const std::vector<Claim>& claims) override;
  void refund(const std::string& bucket, double limit, double amount) override;
  using RateLimiter::refund;

  // For tests: the clock the buckets refill by.
  void set_clock(std::function<Clock::time_point()> now) { now_ = std::move(now); }
  // How many buckets are held (for tests and metrics).
  size_t bucket_count() const;

 private:
  struct Bucket {
    double level = 0;
    double limit = 0;  // as last claimed
    Clock::time_point updated;
  };
  Bucket& bucket(const std::string& name, double limit, Clock::time_point now);
  void sweep_if_due(Clock::time_point now);
  void sweep(Clock::time_point now);
  void drop_least_recently_used(size_t keep);

  double window_s_;
  size_t max_buckets_;
  std::function<Clock::time_point()> now_ = [] { return Clock::now(); };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Bucket> buckets_;
  Clock::time_point last_sweep_;
  size_t next_sweep_size_;
};

}  // namespace chatflow::limits
