// How many threads `threads: 0` gives an engine: the CPUs of the process's affinity mask, within
// its cgroup's CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us), read from cgroup
// files laid out here as a container or a systemd host shows them.
#include "framework/engine/compute_threads.h"

#include <filesystem>
#include <fstream>
#include <sched.h>
#include <thread>

#include <gtest/gtest.h>

#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

namespace fs = std::filesystem;

// A fake cgroup filesystem and /proc/self/cgroup in a fresh directory.
class FakeCgroups {
 public:
  explicit FakeCgroups(const std::string& name) : root_(testing::temp_path(name)) {
    fs::remove_all(root_);
    fs::create_directories(root_ / "fs");
  }
  void write(const std::string& relative, const std::string& text) {
    fs::path path = root_ / "fs" / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  void self(const std::string& lines) { std::ofstream(root_ / "self_cgroup") << lines; }
  CpuLimitSources sources() const {
    return {(root_ / "fs").string(), (root_ / "self_cgroup").string()};
  }

 private:
  fs::path root_;
};

int affinity_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

TEST(ComputeThreads, CgroupV2QuotaOfTheProcessesCgroup) {
  FakeCgroups cgroups("cgroup_v2_quota");
  cgroups.self("0::/app.slice/chatflow.service\n");
  cgroups.write("cpu.max", "max 100000\n");
  cgroups.write("app.slice/chatflow.service/cpu.max", "150000 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(cgroups.sources()), 1.5);
  EXPECT_EQ(available_cpus(cgroups.sources()), 1) << "1.5 CPUs: one thread, not two throttled";
}

TEST(ComputeThreads, AParentsQuotaHoldsForItsChildren) {
  FakeCgroups cgroups("cgroup_v2_parent");
  cgroups.self("0::/a/b\n");
  cgroups.write("a/cpu.max", "200000 100000\n");
  cgroups.write("a/b/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(cgroups.sources()), 2.0);
  EXPECT_EQ(available_cpus(cgroups.sources()), std::min(2, affinity_count()));
}

TEST(ComputeThreads, AContainerSeesItsOwnCgroupAtTheRoot) {
  // The path names the host's hierarchy; inside the container it is not there.
  FakeCgroups cgroups("cgroup_v2_container");
  cgroups.self("0::/system.slice/docker-4f2a.scope\n");
  cgroups.write("cpu.max", "100000 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(cgroups.sources()), 1.0);
  EXPECT_EQ(available_cpus(cgroups.sources()), 1);
}

TEST(ComputeThreads, CgroupV1QuotaAndPeriod) {
  FakeCgroups cgroups("cgroup_v1_quota");
  cgroups.self("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n");
  cgroups.write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  cgroups.write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_quota(cgroups.sources()), 2.5);
  cgroups.write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(cgroup_cpu_quota(cgroups.sources()), std::nullopt);
}

TEST(ComputeThreads, WithoutAQuotaTheAffinityMaskDecides) {
  FakeCgroups cgroups("cgroup_none");
  cgroups.self("0::/\n");
  cgroups.write("cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(cgroups.sources()), std::nullopt);
  EXPECT_EQ(available_cpus(cgroups.sources()), affinity_count());
  EXPECT_EQ(cgroup_cpu_quota({"/nonexistent", "/nonexistent/cgroup"}), std::nullopt);
}

TEST(ComputeThreads, AThreadPinnedToOneCpuCountsOne) {
  FakeCgroups cgroups("cgroup_pinned");
  cgroups.self("0::/\n");
  int seen = 0;
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    cpu_set_t all;
    CPU_ZERO(&all);
    ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &all)) {
        CPU_SET(cpu, &one);
        break;
      }
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    seen = available_cpus(cgroups.sources());
  });
  pinned.join();
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace chatflow::engine
