// Prometheus metrics: counters, gauges and histograms with labels, rendered in the text
// exposition format for GET /metrics. Updates are lock-free atomics; only creating a new label
// set takes a lock, so hot paths look their series up once and keep the reference.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chatflow::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void add(double amount = 1) { value_.fetch_add(amount, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void add(double amount) { value_.fetch_add(amount, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bound, then +Inf; not cumulative
  std::atomic<double> sum_{0};
};

// Bucket bounds in seconds for request latencies (1 ms .. 10 min), as vLLM uses.
std::vector<double> latency_buckets();
// Bucket bounds for per-token latencies (1 ms .. 10 s).
std::vector<double> token_latency_buckets();
// A stage's time: most stages take microseconds, so the buckets start at 10 µs.
std::vector<double> stage_latency_buckets();

// Which bucket bounds a histogram has (the functions above).
enum class MetricBuckets { none, latency, token_latency, stage_latency };
std::vector<double> bucket_bounds(MetricBuckets buckets);

enum class MetricType { counter, gauge, histogram };
std::string_view to_string(MetricType type);

// A metric as it is exported: the server's own are listed in exported_metrics.h, and the
// registry takes their label names from here, so a series cannot carry labels its definition
// does not name.
struct MetricDefinition {
  std::string_view name;
  MetricType type = MetricType::counter;
  std::array<std::string_view, 3> labels{};  // names in order; unused ones empty
  std::string_view help;
  MetricBuckets buckets = MetricBuckets::none;  // histograms only
  std::string_view group;                       // the heading it is listed under in the docs

  constexpr size_t label_count() const {
    size_t count = 0;
    while (count < labels.size() && !labels[count].empty())
      ++count;
    return count;
  }
};

// One series' value as render() writes it: a histogram gives its _bucket series (`le` last)
// and its _count.
struct MetricSample {
  std::string name;
  Labels labels;
  double value = 0;
};

// A series' label values, in the order of its definition's label names.
using LabelValues = std::vector<std::string>;

class MetricsRegistry {
 public:
  // Get-or-create: the same name and labels give the same series. A name has one type and help.
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help,
                       const std::vector<double>& upper_bounds, const Labels& labels = {});

  // Values read at scrape time (engine gauges). `type` is "gauge" or "counter".
  using Sampler = std::function<std::vector<std::pair<Labels, double>>()>;
  void sampled(const std::string& name, const std::string& type, const std::string& help,
               Sampler sampler);

  // The same, for a defined metric: its name, type, help and buckets, and its label names for
  // `values`. Throws std::logic_error when the number of values does not match its label names
  // or the metric is of another type (a programming error, caught by any test that reaches it).
  Counter& counter(const MetricDefinition& metric, const LabelValues& values = {});
  Gauge& gauge(const MetricDefinition& metric, const LabelValues& values = {});
  Histogram& histogram(const MetricDefinition& metric, const LabelValues& values = {});
  using ValueSampler = std::function<std::vector<std::pair<LabelValues, double>>()>;
  void sampled(const MetricDefinition& metric, ValueSampler sampler);

  // Forgets every sampler (a reloaded pipeline registers its own; the old ones would keep the
  // old pipeline alive and count it twice).
  void clear_samplers();

  std::string render() const;
  // The series of the families `wanted` accepts (by family name), histograms without _sum:
  // what the dashboard's history keeps of each scrape.
  std::vector<MetricSample> collect(const std::function<bool(std::string_view)>& wanted) const;

 private:
  struct Family {
    std::string type;
    std::string help;
    std::map<std::string, Labels> label_sets;  // key: rendered labels
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
    std::vector<Sampler> samplers;
  };
  Family& family(const std::string& name, const std::string& type, const std::string& help);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
  // Held while samplers run and while they are cleared, but not mutex_: a sampler may take a
  // lock of its own (the model router's) whose holder counts into this registry, so running it
  // under mutex_ would deadlock. Once clear_samplers returns, no old sampler runs again.
  mutable std::mutex sampling_mutex_;
};

}  // namespace chatflow::server
