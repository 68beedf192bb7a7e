// A few threads for work that must not run on an I/O thread (tokenizing megabytes of text, a
// database read): while it runs, every other connection keeps being served.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chatflow::server {

class WorkerPool {
 public:
  // `threads` workers; at most `queue_limit` jobs wait.
  WorkerPool(int threads, size_t queue_limit);
  ~WorkerPool();  // runs what is queued, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False (and `job` not run) when the queue is full or the pool is stopping.
  bool submit(std::function<void()> job);

 private:
  void run();

  size_t queue_limit_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace chatflow::server
