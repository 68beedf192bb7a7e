#include "framework/engine/constraint_worker.h"

#include <algorithm>

namespace chatflow::engine {

ConstraintWorker::ConstraintWorker(int threads) : thread_count_(std::max(1, threads)) {}

ConstraintWorker::~ConstraintWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  ready_.notify_all();
  for (auto& thread : threads_)
    thread.join();
}

void ConstraintWorker::post(std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
    if (idle_ < static_cast<int>(queue_.size()) &&
        static_cast<int>(threads_.size()) < thread_count_)
      threads_.emplace_back([this] { run(); });
  }
  ready_.notify_one();
}

void ConstraintWorker::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    ++idle_;
    ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (stopping_) return;
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    work();
    lock.lock();
  }
}

}  // namespace chatflow::engine
