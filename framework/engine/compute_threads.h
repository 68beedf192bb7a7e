// The threads one engine computes with: a oneTBB arena of a fixed size, so a model's forward
// pass never spreads over more cores than it was given (oversubscription is the main trap on
// small machines: for tiny models one thread beats two).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace chatflow::engine {

// Where the limits on this process's CPUs are read (a test points them at files of its own).
struct CpuLimitSources {
  std::string cgroup_root = "/sys/fs/cgroup";  // the cgroup filesystem (v2, or v1's hierarchies)
  std::string self_cgroup = "/proc/self/cgroup";
};

// What the CPU bandwidth quota of this process's cgroup (cgroup v2 cpu.max, or v1
// cpu.cfs_quota_us / cpu.cfs_period_us; the smallest along the path up to the root) allows,
// in CPUs (1.5 for a quota of 150 ms per 100 ms), or nullopt when there is none.
std::optional<double> cgroup_cpu_quota(const CpuLimitSources& sources = {});

// The CPUs this process may compute on: those of its affinity mask (sched_getaffinity: taskset,
// cpusets, a container's --cpuset-cpus) and within its cgroup's quota (a container's --cpus),
// whichever is fewer, rounded down, at least 1. What `threads: 0` sizes an engine by.
int available_cpus(const CpuLimitSources& sources = {});

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
