// One background thread that writes queued items to a store in batches, for stores whose writes
// must not hold up the request path (the usage ledgers). push() never waits on the store; flush()
// waits until everything pushed before it is written or counted lost. A batch whose write fails
// is lost, counted and logged, whatever it threw: an exception escaping the thread would end the
// process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace chatflow::storage {

template <class Item>
class BatchWriter {
 public:
  using Batch = std::deque<Item>;
  using Write = std::function<void(Batch& batch)>;  // throws when not written
  using Upkeep = std::function<void()>;

  // `what` names the store in messages ("usage ledger var/usage.db"). `upkeep` is work the
  // writer also does, busy or idle, at start and then every `upkeep_interval` (e.g. removing
  // expired rows); none without an interval.
  BatchWriter(std::string what, Write write, Upkeep upkeep = {},
              std::chrono::milliseconds upkeep_interval = std::chrono::milliseconds(0))
      : what_(std::move(what)),
        write_(std::move(write)),
        upkeep_(std::move(upkeep)),
        upkeep_interval_(upkeep_interval) {
    thread_ = std::thread([this] { run(); });
  }
  // Writes what is queued, then stops.
  ~BatchWriter() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    thread_.join();
  }
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  void push(Item item) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(item));
    }
    work_.notify_one();
  }

  void flush() {
    std::unique_lock lock(mutex_);
    written_.wait(lock, [&] { return queue_.empty() && !writing_; });
  }

  // Items in batches that failed, and when the last one did (Unix seconds; 0: never).
  int64_t lost() const {
    std::lock_guard lock(mutex_);
    return lost_;
  }
  int64_t last_failure_time() const {
    std::lock_guard lock(mutex_);
    return last_failure_time_;
  }

 private:
  void run() {
    const bool upkeep = upkeep_ && upkeep_interval_.count() > 0;
    auto next_upkeep = std::chrono::steady_clock::now();
    while (true) {
      Batch batch;  // taken by swapping: nothing here allocates outside attempt()
      {
        std::unique_lock lock(mutex_);
        auto ready = [&] { return stopping_ || !queue_.empty(); };
        if (upkeep) {
          work_.wait_until(lock, next_upkeep, ready);
        } else {
          work_.wait(lock, ready);
        }
        if (queue_.empty() && stopping_) return;
        batch.swap(queue_);
        writing_ = !batch.empty();
      }
      if (upkeep && std::chrono::steady_clock::now() >= next_upkeep) {
        attempt(upkeep_, 0);
        next_upkeep = std::chrono::steady_clock::now() + upkeep_interval_;
      }
      if (batch.empty()) continue;
      bool written = attempt([&] { write_(batch); }, batch.size());
      {
        std::lock_guard lock(mutex_);
        writing_ = false;
        if (!written) {
          lost_ += static_cast<int64_t>(batch.size());
          last_failure_time_ = static_cast<int64_t>(std::time(nullptr));
        }
      }
      written_.notify_all();
    }
  }

  // Runs `work`; false (and a log line, with the `lost` rows it cost) when it threw.
  template <class Work>
  bool attempt(Work&& work, size_t lost) {
    try {
      work();
      return true;
    } catch (const std::exception& error) {
      log_failure(error.what(), lost);
    } catch (...) {
      log_failure("an unknown failure", lost);
    }
    return false;
  }

  void log_failure(const char* why, size_t lost) const {
    if (lost == 0) {
      std::fprintf(stderr, "chatflow: %s: %s\n", what_.c_str(), why);
    } else {
      std::fprintf(stderr, "chatflow: %s: %s (%zu rows lost)\n", what_.c_str(), why, lost);
    }
  }

  std::string what_;
  Write write_;
  Upkeep upkeep_;
  std::chrono::milliseconds upkeep_interval_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable written_;
  std::deque<Item> queue_;
  bool writing_ = false;
  bool stopping_ = false;
  int64_t lost_ = 0;
  int64_t last_failure_time_ = 0;
  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace chatflow::storage
