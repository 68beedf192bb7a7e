// The dashboard's memory of the server's own metrics: every few seconds the server samples the
// /metrics series the dashboard draws and keeps them in three rings, one per time range the
// dashboard offers (15 min every 5 s, 1 h every 20 s, 6 h every 2 min; 180 points each), so a
// reloaded page, or one opened later, draws the past. Counters and histogram buckets are kept
// as they are (cumulative), so a coarser ring loses no meaning: a rate or a percentile is the
// difference of two samples over the time between them, at any resolution.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "framework/server/metrics.h"

namespace chatflow::server {

// One time range: a sample every `step_ms`, the latest `points` of them.
struct HistoryRange {
  std::string_view name;
  int64_t step_ms = 0;
  size_t points = 0;
};

inline constexpr std::array kHistoryRanges = std::to_array<HistoryRange>({
    {"15m", 5'000, 180},
    {"1h", 20'000, 180},
    {"6h", 120'000, 180},
});

class DashboardHistory {
 public:
  // More distinct series than this (many tenants, say) and the newer ones are not kept: a bound
  // on memory (points x series x 8 bytes: about 17 MB at most).
  static constexpr size_t kMaxSeries = 4096;

  // Kept by hand (record()): what the tests use.
  DashboardHistory() = default;
  // Samples `metrics` at once and then at every step of the finest range, on a thread of its
  // own until destroyed.
  explicit DashboardHistory(const MetricsRegistry& metrics);
  DashboardHistory(const DashboardHistory&) = delete;
  DashboardHistory& operator=(const DashboardHistory&) = delete;
  ~DashboardHistory();

  // Adds a sample taken at `unix_ms` to each range whose step has moved on since its latest
  // point (a sample in the same step as the latest point is left out of that range).
  void record(int64_t unix_ms, const std::vector<MetricSample>& samples);

  // The range's points later than `after_ms`, oldest first, as the JSON of GET
  // /v1/dashboard/history; nullopt when `range` names no range.
  std::optional<std::string> json(std::string_view range, int64_t after_ms) const;

  size_t points(std::string_view range) const;
  size_t series() const;

  // Whether the dashboard draws the metric family `name`: only those are kept.
  static bool kept_family(std::string_view name);

 private:
  struct Point {
    int64_t unix_ms = 0;
    std::vector<double> values;  // by series id; NaN where the series did not exist
  };
  struct Ring {
    HistoryRange range;
    std::deque<Point> points;
  };

  void sample_until_stopped(std::stop_token stop);

  const MetricsRegistry* metrics_ = nullptr;
  mutable std::mutex mutex_;
  std::map<std::string, size_t> series_ids_;  // name and rendered labels → index in series_
  std::vector<MetricSample> series_;          // name and labels of each series kept
  size_t dropped_series_ = 0;
  std::array<Ring, kHistoryRanges.size()> rings_{
      Ring{kHistoryRanges[0], {}}, Ring{kHistoryRanges[1], {}}, Ring{kHistoryRanges[2], {}}};
  std::condition_variable_any wake_;
  std::jthread sampler_;  // last: stopped and joined before the rest goes
};

}  // namespace chatflow::server
