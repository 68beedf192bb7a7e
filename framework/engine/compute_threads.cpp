#include "compute_threads.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace chatflow::engine {

struct ComputeThreads::Arena {
  explicit Arena(int threads) : arena(threads) {}
  tbb::task_arena arena;
};

ComputeThreads::ComputeThreads(int threads)
    : threads_(threads < 1 ? 1 : threads), arena_(std::make_unique<Arena>(threads_)) {}

ComputeThreads::~ComputeThreads() = default;

void ComputeThreads::run(const std::function<void()>& work) {
  arena_->arena.execute(work);
}

void ComputeThreads::parallel_for(int64_t count, int64_t grain,
                                  const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  if (threads_ == 1 || count <= grain) {
    body(0, count);
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, count, grain),
      [&](const tbb::blocked_range<int64_t>& range) { body(range.begin(), range.end()); },
      tbb::simple_partitioner());
}

}  // namespace chatflow::engine
