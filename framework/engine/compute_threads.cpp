#include "framework/engine/compute_threads.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <thread>
#include <vector>

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

namespace fs = std::filesystem;

std::optional<int64_t> to_integer(std::string_view text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string first_line(const fs::path& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// cgroup v2: cpu.max holds "QUOTA PERIOD" in microseconds, or "max PERIOD" for none.
std::optional<double> quota_v2(const fs::path& directory) {
  std::istringstream fields(first_line(directory / "cpu.max"));
  std::string quota, period;
  fields >> quota >> period;
  auto quota_us = to_integer(quota);
  auto period_us = to_integer(period);
  if (!quota_us || !period_us || *quota_us <= 0 || *period_us <= 0) return std::nullopt;
  return static_cast<double>(*quota_us) / static_cast<double>(*period_us);
}

// cgroup v1: cpu.cfs_quota_us is -1 for none.
std::optional<double> quota_v1(const fs::path& directory) {
  auto quota_us = to_integer(first_line(directory / "cpu.cfs_quota_us"));
  auto period_us = to_integer(first_line(directory / "cpu.cfs_period_us"));
  if (!quota_us || !period_us || *quota_us <= 0 || *period_us <= 0) return std::nullopt;
  return static_cast<double>(*quota_us) / static_cast<double>(*period_us);
}

// The smallest quota from the process's cgroup up to the hierarchy's root (a parent's quota
// holds for everything below it). Inside a container the cgroup path names the host's
// hierarchy while the container sees its own cgroup at the root: then the root alone counts.
std::optional<double> smallest_quota(const fs::path& root, const std::string& cgroup,
                                     std::optional<double> (*quota_of)(const fs::path&)) {
  fs::path relative = fs::path(cgroup).relative_path().lexically_normal();
  std::error_code error;
  fs::path directory = root / relative;
  if (relative.empty() || relative == "." || !fs::is_directory(directory, error)) relative.clear();
  std::optional<double> smallest;
  while (true) {
    auto quota = quota_of(relative.empty() ? root : root / relative);
    if (quota && (!smallest || *quota < *smallest)) smallest = quota;
    if (relative.empty()) break;
    relative = relative.parent_path();
  }
  return smallest;
}

bool lists_cpu(std::string_view controllers) {
  while (!controllers.empty()) {
    size_t comma = controllers.find(',');
    if (controllers.substr(0, comma) == "cpu") return true;
    if (comma == std::string_view::npos) break;
    controllers.remove_prefix(comma + 1);
  }
  return false;
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  // More CPUs than a cpu_set_t holds: the affinity mask is the least of the limits there.
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

std::optional<double> cgroup_cpu_quota(const CpuLimitSources& sources) {
  // Lines of "hierarchy:controllers:path"; "0::path" is cgroup v2's unified hierarchy.
  std::ifstream self(sources.self_cgroup);
  std::optional<std::string> unified, cpu_v1;
  std::string line;
  while (std::getline(self, line)) {
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string_view controllers = std::string_view(line).substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) unified = path;
    if (lists_cpu(controllers)) cpu_v1 = path;
  }
  const fs::path root = sources.cgroup_root;
  if (cpu_v1) {  // v1 (or hybrid: the cpu controller is on a v1 hierarchy)
    std::error_code error;
    for (const char* mount : {"cpu,cpuacct", "cpu", "cpuacct,cpu"}) {
      if (fs::is_directory(root / mount, error))
        return smallest_quota(root / mount, *cpu_v1, quota_v1);
    }
    return std::nullopt;
  }
  if (unified) return smallest_quota(root, *unified, quota_v2);
  return std::nullopt;
}

int available_cpus(const CpuLimitSources& sources) {
  int cpus = affinity_cpus();
  if (auto quota = cgroup_cpu_quota(sources))
    cpus = std::min(cpus, std::max(1, static_cast<int>(std::floor(*quota))));
  return std::max(1, cpus);
}

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
