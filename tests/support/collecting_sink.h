// A sink for tests: keeps every chunk and lets the test wait (with a time limit, so a bug shows
// as a failure instead of a hung test run) until the request finished.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/api/chunk.h"
#include "framework/api/request.h"
#include "framework/api/sink.h"

namespace chatflow::testing {

class CollectingSink final : public Sink {
 public:
  void on_chunk(Request&, const Chunk& chunk) override {
    std::lock_guard lock(mutex_);
    if (finished_) chunk_after_finish_ = true;
    chunks_.push_back(chunk);
  }
  void on_finish(Request&) override {
    std::lock_guard lock(mutex_);
    ++finish_calls_;
    finished_ = true;
    changed_.notify_all();
  }

  // True when the request finished within `limit`.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [this] { return finished_; });
  }

  std::string text() const {
    std::lock_guard lock(mutex_);
    std::string joined;
    for (const auto& chunk : chunks_)
      joined += chunk.text;
    return joined;
  }
  std::vector<Chunk> chunks() const {
    std::lock_guard lock(mutex_);
    return chunks_;
  }
  int finish_calls() const {
    std::lock_guard lock(mutex_);
    return finish_calls_;
  }
  bool chunk_after_finish() const {
    std::lock_guard lock(mutex_);
    return chunk_after_finish_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Chunk> chunks_;
  bool finished_ = false;
  bool chunk_after_finish_ = false;
  int finish_calls_ = 0;
};

// Passes everything to a CollectingSink and tells when the request was released (when stages'
// release callbacks, such as a quota's settlement, have run).
class ReleaseWatchingSink final : public Sink {
 public:
  explicit ReleaseWatchingSink(std::shared_ptr<CollectingSink> inner) : inner_(std::move(inner)) {}
  void on_chunk(Request& request, const Chunk& chunk) override { inner_->on_chunk(request, chunk); }
  void on_finish(Request& request) override { inner_->on_finish(request); }
  void on_released(const Request&) override {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }
  bool wait_released() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(20), [this] { return released_; });
  }

 private:
  std::shared_ptr<CollectingSink> inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool released_ = false;
};

}  // namespace chatflow::testing
