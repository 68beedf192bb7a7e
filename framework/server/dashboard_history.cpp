#include "framework/server/dashboard_history.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>

#include <boost/json.hpp>

namespace chatflow::server {
namespace {

// The families the dashboard's charts and counters read (web/src/charts.js).
constexpr std::array<std::string_view, 26> kKeptFamilies = {
    "chatflow:num_requests_running",
    "chatflow:num_requests_waiting",
    "chatflow:requests_in_flight",
    "chatflow:time_to_first_token_seconds",
    "chatflow:inter_token_latency_seconds",
    "chatflow:request_time_per_output_token_seconds",
    "chatflow:e2e_request_latency_seconds",
    "chatflow:request_queue_time_seconds",
    "chatflow:stage_duration_seconds",
    "chatflow:prompt_tokens_total",
    "chatflow:generation_tokens_total",
    "chatflow:cache_served_tokens_total",
    "chatflow:request_success_total",
    "chatflow:request_failure_total",
    "chatflow:request_annotations_total",
    "chatflow:http_requests_total",
    "chatflow:tenant_requests_total",
    "chatflow:tenant_tokens_total",
    "chatflow:arm_requests_total",
    "chatflow:arm_time_to_first_token_seconds",
    "chatflow:kv_cache_usage_perc",
    "chatflow:prefix_cache_queries_total",
    "chatflow:prefix_cache_hits_total",
    "chatflow:engine_generated_tokens_total",
    "chatflow:engine_prompt_tokens_computed_total",
    "chatflow:num_preemptions_total",
};

std::string series_key(const MetricSample& sample) {
  std::string key = sample.name;
  for (const auto& [name, value] : sample.labels) {
    key += '\x1f';
    key += name;
    key += '=';
    key += value;
  }
  return key;
}

void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool DashboardHistory::kept_family(std::string_view name) {
  return std::find(kKeptFamilies.begin(), kKeptFamilies.end(), name) != kKeptFamilies.end();
}

DashboardHistory::DashboardHistory(const MetricsRegistry& metrics) : metrics_(&metrics) {
  sampler_ = std::jthread([this](std::stop_token stop) { sample_until_stopped(stop); });
}

DashboardHistory::~DashboardHistory() {
  if (sampler_.joinable()) {
    sampler_.request_stop();
    sampler_.join();
  }
}

// A sample now, then one just after each step boundary of the finest range (5 s, 10 s, ...), so
// every step of every range gets exactly one.
void DashboardHistory::sample_until_stopped(std::stop_token stop) {
  const int64_t step = kHistoryRanges[0].step_ms;
  while (!stop.stop_requested()) {
    int64_t now = unix_ms_now();
    record(now, metrics_->collect(kept_family));
    int64_t next = (now / step + 1) * step + 50;
    auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(next - now);
    std::unique_lock lock(mutex_);
    wake_.wait_until(lock, stop, deadline, [] { return false; });
  }
}

void DashboardHistory::record(int64_t unix_ms, const std::vector<MetricSample>& samples) {
  std::lock_guard lock(mutex_);
  Point point{unix_ms,
              std::vector<double>(series_.size(), std::numeric_limits<double>::quiet_NaN())};
  for (const MetricSample& sample : samples) {
    auto [found, added] = series_ids_.try_emplace(series_key(sample), series_.size());
    if (added) {
      if (series_.size() >= kMaxSeries) {
        series_ids_.erase(found);
        ++dropped_series_;
        continue;
      }
      series_.push_back({sample.name, sample.labels, 0});
      point.values.push_back(std::numeric_limits<double>::quiet_NaN());
    }
    point.values[found->second] = sample.value;
  }
  for (Ring& ring : rings_) {
    int64_t step = ring.range.step_ms;
    if (!ring.points.empty() && unix_ms / step <= ring.points.back().unix_ms / step) continue;
    ring.points.push_back(point);
    while (ring.points.size() > ring.range.points)
      ring.points.pop_front();
  }
}

std::optional<std::string> DashboardHistory::json(std::string_view range, int64_t after_ms) const {
  std::lock_guard lock(mutex_);
  const Ring* ring = nullptr;
  for (const Ring& candidate : rings_) {
    if (candidate.range.name == range) ring = &candidate;
  }
  if (!ring) return std::nullopt;
  namespace json = boost::json;
  std::string out = R"({"object":"dashboard.history","range":)";
  out += json::serialize(json::string(ring->range.name));
  out += ",\"step_s\":" + std::to_string(ring->range.step_ms / 1000);
  out += ",\"capacity\":" + std::to_string(ring->range.points);
  out += ",\"dropped_series\":" + std::to_string(dropped_series_);
  out += ",\"series\":[";
  for (size_t i = 0; i < series_.size(); ++i) {
    json::object labels;
    for (const auto& [name, value] : series_[i].labels)
      labels[name] = value;
    if (i > 0) out += ',';
    out += json::serialize(json::object{{"name", series_[i].name}, {"labels", labels}});
  }
  out += "],\"samples\":[";
  bool first = true;
  for (const Point& point : ring->points) {
    if (point.unix_ms <= after_ms) continue;
    if (!first) out += ',';
    first = false;
    out += "{\"t\":" + std::to_string(point.unix_ms) + ",\"values\":[";
    // Every point has a value (or null) for every series, those born after it included.
    for (size_t i = 0; i < series_.size(); ++i) {
      if (i > 0) out += ',';
      append_number(out, i < point.values.size() ? point.values[i]
                                                 : std::numeric_limits<double>::quiet_NaN());
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

size_t DashboardHistory::points(std::string_view range) const {
  std::lock_guard lock(mutex_);
  for (const Ring& ring : rings_) {
    if (ring.range.name == range) return ring.points.size();
  }
  return 0;
}

size_t DashboardHistory::series() const {
  std::lock_guard lock(mutex_);
  return series_.size();
}

}  // namespace chatflow::server
