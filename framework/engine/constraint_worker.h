// Threads beside the engine thread for constraints' slow work (token masks of a grammar state
// not seen before, TokenConstraint::prepare): the sequence that needs it waits for it alone,
// while every other sequence keeps stepping. Threads start on the first work posted.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chatflow::engine {

class ConstraintWorker {
 public:
  explicit ConstraintWorker(int threads);
  // Work still queued is dropped; work running now is waited for (constraints' work stops
  // promptly once its sequence abandoned it).
  ~ConstraintWorker();
  ConstraintWorker(const ConstraintWorker&) = delete;
  ConstraintWorker& operator=(const ConstraintWorker&) = delete;

  // Runs `work` on one of the threads, in the order posted.
  void post(std::function<void()> work);

 private:
  void run();

  const int thread_count_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  int idle_ = 0;  // threads waiting for work
  std::vector<std::thread> threads_;
};

}  // namespace chatflow::engine
