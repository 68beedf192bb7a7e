#include "framework/server/pipeline_reaper.h"

namespace chatflow::server {

PipelineReaper::~PipelineReaper() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  // Never on the reaper's thread: it destroys pipelines, which hold no reference to the reaper
  // (the shared_ptrs' control blocks, with their deleters, go on the threads that let go).
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const ServedPipeline> PipelineReaper::adopt(
    std::unique_ptr<ServedPipeline> served, std::shared_ptr<PipelineReaper> reaper) {
  return std::shared_ptr<const ServedPipeline>(
      served.release(),
      [reaper = std::move(reaper)](ServedPipeline* last) { reaper->dispose(last); });
}

void PipelineReaper::dispose(ServedPipeline* served) {
  {
    std::lock_guard lock(mutex_);
    // The reaper's own thread is off the I/O threads already, and must not wait for itself.
    if (thread_.get_id() != std::this_thread::get_id()) {
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
      queue_.push_back(served);
      wake_.notify_one();
      return;
    }
  }
  delete served;
}

void PipelineReaper::wait_until_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void PipelineReaper::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, with nothing left to destroy
    ServedPipeline* served = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    delete served;
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace chatflow::server
