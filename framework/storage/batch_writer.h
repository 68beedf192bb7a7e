// One background thread that writes queued items to a store in batches, for stores whose writes
// must not hold up the request path (the usage ledgers, queued session turns). push() never waits
// on the store.
//
// A batch whose write fails for a reason that passes (options.is_transient: the server cannot be
// reached, it restarts) is kept and written again, the wait doubling from first_backoff to
// max_backoff, until it is written; items pushed meanwhile wait behind it, in order. At most
// max_buffered items wait in all: an item pushed past that is dropped, counted lost and logged.
// Any other failure loses the batch, counted and logged, whatever it threw: an exception escaping
// the thread would end the process. At stop, a store that still fails is tried for stop_grace,
// then what is left is counted lost.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "framework/storage/failure_log.h"

namespace chatflow::storage {

struct BatchWriterOptions {
  // Items waiting (queued, plus the batch being written) at most; one more is dropped.
  size_t max_buffered = 100'000;
  // Items written in one batch at most (one transaction).
  size_t max_batch = 1'000;
  // Whether a failed write is worth trying again (none: no failure is).
  std::function<bool(const std::exception& error)> is_transient;
  std::chrono::milliseconds first_backoff{100};
  std::chrono::milliseconds max_backoff{5'000};
  // At stop, how long a store that keeps failing transiently is still tried.
  std::chrono::milliseconds stop_grace{5'000};
  // Work the writer also does, busy or idle, at start and then every `upkeep_interval` (e.g.
  // removing expired rows); none without an interval. Its failures are only logged.
  std::function<void()> upkeep;
  std::chrono::milliseconds upkeep_interval{0};
};

template <class Item>
class BatchWriter {
 public:
  using Batch = std::deque<Item>;
  using Write = std::function<void(const Batch& batch)>;  // throws when not written

  // `what` names the store in messages ("usage ledger var/usage.db").
  BatchWriter(std::string what, Write write, BatchWriterOptions options = {})
      : what_(std::move(what)),
        write_(std::move(write)),
        options_(std::move(options)),
        outage_log_(what_),
        overflow_log_(what_) {
    options_.max_buffered = std::max<size_t>(options_.max_buffered, 1);
    options_.max_batch = std::max<size_t>(options_.max_batch, 1);
    thread_ = std::thread([this] { run(); });
  }
  // Writes what is queued (trying a failing store for stop_grace), then stops.
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

  // False when the item was dropped: max_buffered items already wait.
  bool push(Item item) {
    {
      std::lock_guard lock(mutex_);
      if (queue_.size() + writing_.size() >= options_.max_buffered) {
        ++lost_;
        last_failure_time_ = unix_now();
        overflow_log_.failed(
            std::to_string(options_.max_buffered) + " rows already wait to be written",
            "new rows are dropped and counted lost");
        return false;
      }
      queue_.push_back(std::move(item));
      ++accepted_;
    }
    work_.notify_one();
    return true;
  }

  // Waits until every item pushed before the call is written, counted lost or discarded: true.
  // Returns false at once when a write failed transiently and waits to be tried again (the
  // items are kept; the store cannot be reached now).
  bool flush() {
    std::unique_lock lock(mutex_);
    uint64_t target = accepted_;
    ++waiting_flushes_;
    written_.wait(lock, [&] { return finished_ >= target || retrying_; });
    --waiting_flushes_;
    return finished_ >= target;
  }
  // As flush(), but a batch waiting to be tried again is tried at once (its wait cut short) and
  // the call waits for that try: false when it (or a later batch before the call's items)
  // fails transiently again. For callers that must not overtake what waits (a session's turns
  // keep their order), at the cost of one more try of a store that may still be down.
  bool flush_trying_now() {
    std::unique_lock lock(mutex_);
    uint64_t target = accepted_;
    uint64_t failures_before = transient_failures_;
    if (retrying_) {
      retry_now_ = true;
      work_.notify_all();
    }
    ++waiting_flushes_;
    written_.wait(lock,
                  [&] { return finished_ >= target || transient_failures_ != failures_before; });
    --waiting_flushes_;
    return finished_ >= target;
  }

  // Whether an item matching `matches` waits (queued or being written).
  template <class Matches>
  bool any_pending(Matches&& matches) const {
    std::lock_guard lock(mutex_);
    return std::any_of(queue_.begin(), queue_.end(), matches) ||
           std::any_of(writing_.begin(), writing_.end(), matches);
  }
  // Takes the queued items matching `matches` out, unwritten (a batch being written stays);
  // returns how many.
  template <class Matches>
  size_t discard_queued(Matches&& matches) {
    size_t discarded = 0;
    {
      std::lock_guard lock(mutex_);
      auto kept = std::remove_if(queue_.begin(), queue_.end(), matches);
      discarded = static_cast<size_t>(queue_.end() - kept);
      queue_.erase(kept, queue_.end());
      finished_ += discarded;
    }
    // A flush() waiting for these items has nothing left to wait for, and the writer, which
    // may find the queue empty now, will not end a batch that would tell it.
    if (discarded > 0) written_.notify_all();
    return discarded;
  }

  // Items lost (failed, dropped, given up at stop), and when the last write failed, transiently
  // or not (Unix seconds; 0: never).
  int64_t lost() const {
    std::lock_guard lock(mutex_);
    return lost_;
  }
  int64_t last_failure_time() const {
    std::lock_guard lock(mutex_);
    return last_failure_time_;
  }
  // Items waiting to be written.
  size_t buffered() const {
    std::lock_guard lock(mutex_);
    return queue_.size() + writing_.size();
  }
  // flush() calls waiting now (for tests that must know a caller is inside flush()).
  size_t waiting_flushes() const {
    std::lock_guard lock(mutex_);
    return waiting_flushes_;
  }

 private:
  enum class Outcome { written, transient, failed };

  static int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

  void run() {
    const bool upkeep = options_.upkeep && options_.upkeep_interval.count() > 0;
    auto next_upkeep = std::chrono::steady_clock::now();
    while (true) {
      {
        std::unique_lock lock(mutex_);
        auto ready = [&] { return stopping_ || !queue_.empty(); };
        if (upkeep) {
          work_.wait_until(lock, next_upkeep, ready);
        } else {
          work_.wait(lock, ready);
        }
        if (queue_.empty() && stopping_) return;
        // writing_ changes only here and in finish(), under the lock; other threads read it.
        size_t count = std::min(queue_.size(), options_.max_batch);
        for (size_t i = 0; i < count; ++i) {
          writing_.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      if (upkeep && std::chrono::steady_clock::now() >= next_upkeep) {
        attempt(options_.upkeep, 0);
        next_upkeep = std::chrono::steady_clock::now() + options_.upkeep_interval;
      }
      if (!writing_.empty()) write_until_done();
    }
  }

  // Writes the batch, again and again while it fails transiently.
  void write_until_done() {
    auto backoff = options_.first_backoff;
    std::optional<std::chrono::steady_clock::time_point> give_up_at;
    while (true) {
      std::string transient_error;
      Outcome outcome = write_once(transient_error);
      std::unique_lock lock(mutex_);
      if (outcome != Outcome::transient) {
        finish(outcome == Outcome::written, lock);
        return;
      }
      last_failure_time_ = unix_now();
      retrying_ = true;
      ++transient_failures_;
      retry_now_ = false;     // this try was the one asked for
      written_.notify_all();  // flush() stops waiting
      outage_log_.failed(transient_error, std::to_string(queue_.size() + writing_.size()) +
                                              " rows are kept and written when it answers");
      if (stopping_) {
        auto now = std::chrono::steady_clock::now();
        if (!give_up_at) give_up_at = now + options_.stop_grace;
        if (now >= *give_up_at) {
          abandon(lock);
          return;
        }
      }
      // A stop cuts the wait short (the grace starts then), and so does flush_trying_now().
      bool was_stopping = stopping_;
      work_.wait_for(lock, backoff, [&] { return (stopping_ && !was_stopping) || retry_now_; });
      retry_now_ = false;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }

  Outcome write_once(std::string& transient_error) {
    try {
      write_(writing_);
      return Outcome::written;
    } catch (const std::exception& error) {
      if (options_.is_transient && options_.is_transient(error)) {
        transient_error = error.what();
        return Outcome::transient;
      }
      log_failure(error.what(), writing_.size());
    } catch (...) {
      log_failure("an unknown failure", writing_.size());
    }
    return Outcome::failed;
  }

  // The batch is written (or lost): the next one may start. Called with mutex_ held.
  void finish(bool written, std::unique_lock<std::mutex>& lock) {
    if (!written) {
      lost_ += static_cast<int64_t>(writing_.size());
      last_failure_time_ = unix_now();
    } else if (retrying_) {
      outage_log_.succeeded();
    }
    retrying_ = false;
    finished_ += writing_.size();
    writing_.clear();
    lock.unlock();
    written_.notify_all();
  }

  // Stopping, and the store still fails: what waits is lost. Called with mutex_ held.
  void abandon(std::unique_lock<std::mutex>& lock) {
    size_t left = writing_.size() + queue_.size();
    std::fprintf(stderr, "chatflow: %s: still failing after %lld ms of stopping (%zu rows lost)\n",
                 what_.c_str(), static_cast<long long>(options_.stop_grace.count()), left);
    lost_ += static_cast<int64_t>(left);
    finished_ += left;
    writing_.clear();
    queue_.clear();
    retrying_ = false;
    lock.unlock();
    written_.notify_all();
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
  BatchWriterOptions options_;
  FailureLog outage_log_;
  FailureLog overflow_log_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable written_;
  Batch queue_;
  Batch writing_;                    // the batch being written
  uint64_t accepted_ = 0;            // items pushed and not dropped
  uint64_t finished_ = 0;            // of those, written, lost or discarded
  bool retrying_ = false;            // the batch failed transiently and waits to be tried again
  uint64_t transient_failures_ = 0;  // tries that failed transiently, ever
  bool retry_now_ = false;           // flush_trying_now() asks for a try without waiting
  bool stopping_ = false;
  size_t waiting_flushes_ = 0;
  int64_t lost_ = 0;
  int64_t last_failure_time_ = 0;
  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace chatflow::storage
