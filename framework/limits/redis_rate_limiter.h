// Token buckets in Redis, shared by every replica that names the same keys: one Lua script per
// reservation checks and takes from every bucket it names, all or nothing, atomically (two
// replicas can never both take a bucket's last unit); another gives the unused part back. The
// buckets refill by Redis's own clock (TIME), so replicas' clocks do not matter, and a bucket's
// key expires once it would be full again anyway.
#pragma once

#include <memory>
#include <string>

#include "framework/limits/rate_limiter.h"

namespace chatflow::redis {
class Client;
}

namespace chatflow::limits {

class RedisRateLimiter final : public RateLimiter {
 public:
  // Buckets live at `key_prefix` + the claim's bucket name.
  RedisRateLimiter(std::shared_ptr<redis::Client> client, std::string key_prefix, double window_s);

  // Both throw LimiterUnavailable, naming the endpoint, when Redis fails.
  Reservation reserve(const std::vector<Claim>& claims) override;
  void refund(const std::string& bucket, double limit, double amount) override;
  void refund(const std::vector<Claim>& claims) override;

 private:
  std::shared_ptr<redis::Client> client_;
  std::string key_prefix_;
  double window_s_;
};

}  // namespace chatflow::limits
