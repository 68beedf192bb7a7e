// Logs a shared store's failures without one line per request: the first failure at once, then
// at most one line per interval with how many failed meanwhile, and one line when it works
// again. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace chatflow::storage {

class FailureLog {
 public:
  // `who` starts every line, e.g. "rate_limit 'limits' (redis shared)".
  explicit FailureLog(std::string who, std::chrono::seconds interval = std::chrono::seconds(10))
      : who_(std::move(who)), interval_(interval) {}

  // `consequence` says what the request got ("requests pass unlimited").
  void failed(const std::string& error, const std::string& consequence) {
    std::lock_guard lock(mutex_);
    ++failures_;
    ++unreported_;
    auto now = std::chrono::steady_clock::now();
    if (failing_ && now - last_line_ < interval_) return;
    std::fprintf(stderr, "chatflow: %s: %s; %s (%lld failures since the last line)\n", who_.c_str(),
                 error.c_str(), consequence.c_str(), static_cast<long long>(unreported_));
    failing_ = true;
    unreported_ = 0;
    last_line_ = now;
  }

  void succeeded() {
    if (!failing_.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(mutex_);
    if (!failing_) return;
    std::fprintf(stderr, "chatflow: %s: works again (%lld failures since the last line)\n",
                 who_.c_str(), static_cast<long long>(unreported_));
    failing_ = false;
    unreported_ = 0;
  }

  int64_t failures() const {
    std::lock_guard lock(mutex_);
    return failures_;
  }

 private:
  std::string who_;
  std::chrono::seconds interval_;
  mutable std::mutex mutex_;
  std::atomic<bool> failing_{false};
  int64_t failures_ = 0;
  int64_t unreported_ = 0;
  std::chrono::steady_clock::time_point last_line_{};
};

}  // namespace chatflow::storage
