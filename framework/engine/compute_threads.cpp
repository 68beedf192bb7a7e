#include "framework/engine/compute_threads.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace chatflow::engine {
namespace {

// Subnormal floats (attention weights of far-off positions, tiny activations of random or
// unusual inputs) take a microcode path that is up to a hundred times slower. Flushing them to
// zero changes results by less than 1e-38 and keeps every step at full speed; it is set for the
// duration of the engine's work on each thread that does it, and restored after.
class FlushSubnormals {
 public:
  FlushSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | 0x8040);  // flush-to-zero and denormals-are-zero
#endif
  }
  ~FlushSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(saved_);
#endif
  }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  unsigned saved_ = 0;
};

}  // namespace

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
