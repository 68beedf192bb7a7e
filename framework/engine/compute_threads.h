// The threads one engine computes with: a oneTBB arena of a fixed size, so a model's forward
// pass never spreads over more cores than it was given (oversubscription is the main trap on
// small machines: for tiny models one thread beats two).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace chatflow::engine {

class ComputeThreads {
 public:
  explicit ComputeThreads(int threads);
  ~ComputeThreads();

  int threads() const { return threads_; }
  // Runs `work` inside the arena (parallel loops in it use at most `threads` threads).
  void run(const std::function<void()>& work);
  // body(begin, end) over [0, count) in chunks of at least `grain`; inline when one chunk or
  // one thread suffices.
  void parallel_for(int64_t count, int64_t grain,
                    const std::function<void(int64_t, int64_t)>& body);

 private:
  struct Arena;
  int threads_;
  std::unique_ptr<Arena> arena_;
};

}  // namespace chatflow::engine
