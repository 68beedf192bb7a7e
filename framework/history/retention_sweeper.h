// Runs a history store's retention sweep on a thread of its own: once at start, then every
// `interval`, until it is destroyed. What a sweep removed, and a sweep that failed, are logged.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "framework/history/history_store.h"

namespace chatflow::history {

class RetentionSweeper {
 public:
  // `store` must outlive the sweeper; `who` starts every log line.
  RetentionSweeper(HistoryStore& store, std::chrono::seconds interval, std::string who)
      : store_(store), interval_(interval), who_(std::move(who)) {
    thread_ = std::thread([this] { run(); });
  }
  ~RetentionSweeper() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  RetentionSweeper(const RetentionSweeper&) = delete;
  RetentionSweeper& operator=(const RetentionSweeper&) = delete;

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      sweep_once();
      lock.lock();
      wake_.wait_for(lock, interval_, [&] { return stopping_; });
    }
  }

  void sweep_once() {
    try {
      SweepOutcome swept = store_.sweep(static_cast<int64_t>(std::time(nullptr)));
      if (swept.expired_turns > 0 || swept.evicted_sessions > 0) {
        std::fprintf(stderr,
                     "chatflow: %s: retention removed %lld expired turns and %lld sessions past "
                     "an owner's limit\n",
                     who_.c_str(), static_cast<long long>(swept.expired_turns),
                     static_cast<long long>(swept.evicted_sessions));
      }
    } catch (const std::exception& error) {
      std::fprintf(stderr, "chatflow: %s: retention sweep failed: %s (tried again in %llds)\n",
                   who_.c_str(), error.what(), static_cast<long long>(interval_.count()));
    }
  }

  HistoryStore& store_;
  std::chrono::seconds interval_;
  std::string who_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace chatflow::history
