#include "framework/server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace chatflow::server {
namespace {

std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="1",b="2"}` with `extra` (e.g. le="0.5") last; "" when there are no labels at all.
std::string render_labels(const Labels& labels, const std::string& extra = {}) {
  if (labels.empty() && extra.empty()) return {};
  std::string out = "{";
  for (const auto& [key, value] : labels) {
    if (out.size() > 1) out += ',';
    out += key + "=\"" + escape_label(value) + "\"";
  }
  if (!extra.empty()) {
    if (out.size() > 1) out += ',';
    out += extra;
  }
  return out + "}";
}

// The definition's label names paired with `values`.
Labels labels_of(const MetricDefinition& metric, const LabelValues& values) {
  if (values.size() != metric.label_count()) {
    throw std::logic_error("metric " + std::string(metric.name) + " has " +
                           std::to_string(metric.label_count()) + " labels, given " +
                           std::to_string(values.size()) + " values");
  }
  Labels labels;
  for (size_t i = 0; i < values.size(); ++i)
    labels.emplace_back(std::string(metric.labels[i]), values[i]);
  return labels;
}

void expect_type(const MetricDefinition& metric, MetricType type) {
  if (metric.type != type) {
    throw std::logic_error("metric " + std::string(metric.name) + " is a " +
                           std::string(to_string(metric.type)) + ", not a " +
                           std::string(to_string(type)));
  }
}

}  // namespace

std::string_view to_string(MetricType type) {
  switch (type) {
    case MetricType::counter:
      return "counter";
    case MetricType::gauge:
      return "gauge";
    case MetricType::histogram:
      return "histogram";
  }
  return "untyped";
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1)) {
  if (!std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()))
    throw std::invalid_argument("histogram bounds must be sorted");
}

void Histogram::observe(double value) {
  size_t bucket = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snapshot;
  snapshot.upper_bounds = upper_bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    snapshot.cumulative.push_back(running);
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,   0.75,  1.0,  2.5,
          5.0,   7.5,   10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 600.0};
}

std::vector<double> stage_latency_buckets() {
  std::vector<double> buckets = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005};
  for (double bound : latency_buckets())
    buckets.push_back(bound);
  return buckets;
}

std::vector<double> token_latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
          0.1,   0.15,   0.2,   0.3,    0.4,  0.5,   0.75, 1.0,   2.5,  5.0,  10.0};
}

std::vector<double> bucket_bounds(MetricBuckets buckets) {
  switch (buckets) {
    case MetricBuckets::latency:
      return latency_buckets();
    case MetricBuckets::token_latency:
      return token_latency_buckets();
    case MetricBuckets::stage_latency:
      return stage_latency_buckets();
    case MetricBuckets::none:
      break;
  }
  return {};
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& type,
                                                 const std::string& help) {
  auto [it, created] = families_.try_emplace(name);
  if (created) {
    it->second.type = type;
    it->second.help = help;
  } else if (it->second.type != type) {
    throw std::logic_error("metric " + name + " registered as " + it->second.type + " and " + type);
  }
  return it->second;
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                  const Labels& labels) {
  std::lock_guard lock(mutex_);
  Family& f = family(name, "counter", help);
  std::string key = render_labels(labels);
  f.label_sets[key] = labels;
  auto& slot = f.counters[key];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help,
                              const Labels& labels) {
  std::lock_guard lock(mutex_);
  Family& f = family(name, "gauge", help);
  std::string key = render_labels(labels);
  f.label_sets[key] = labels;
  auto& slot = f.gauges[key];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      const std::vector<double>& upper_bounds,
                                      const Labels& labels) {
  std::lock_guard lock(mutex_);
  Family& f = family(name, "histogram", help);
  std::string key = render_labels(labels);
  f.label_sets[key] = labels;
  auto& slot = f.histograms[key];
  if (!slot) slot = std::make_unique<Histogram>(upper_bounds);
  return *slot;
}

void MetricsRegistry::sampled(const std::string& name, const std::string& type,
                              const std::string& help, Sampler sampler) {
  std::lock_guard lock(mutex_);
  family(name, type, help).samplers.push_back(std::move(sampler));
}

Counter& MetricsRegistry::counter(const MetricDefinition& metric, const LabelValues& values) {
  expect_type(metric, MetricType::counter);
  return counter(std::string(metric.name), std::string(metric.help), labels_of(metric, values));
}

Gauge& MetricsRegistry::gauge(const MetricDefinition& metric, const LabelValues& values) {
  expect_type(metric, MetricType::gauge);
  return gauge(std::string(metric.name), std::string(metric.help), labels_of(metric, values));
}

Histogram& MetricsRegistry::histogram(const MetricDefinition& metric, const LabelValues& values) {
  expect_type(metric, MetricType::histogram);
  return histogram(std::string(metric.name), std::string(metric.help),
                   bucket_bounds(metric.buckets), labels_of(metric, values));
}

void MetricsRegistry::sampled(const MetricDefinition& metric, ValueSampler sampler) {
  if (metric.type == MetricType::histogram) expect_type(metric, MetricType::gauge);
  sampled(std::string(metric.name), std::string(to_string(metric.type)), std::string(metric.help),
          [metric, sampler = std::move(sampler)] {
            std::vector<std::pair<Labels, double>> samples;
            for (auto& [values, value] : sampler())
              samples.emplace_back(labels_of(metric, values), value);
            return samples;
          });
}

void MetricsRegistry::clear_samplers() {
  std::lock_guard sampling(sampling_mutex_);
  std::lock_guard lock(mutex_);
  for (auto& [name, f] : families_)
    f.samplers.clear();
}

std::string MetricsRegistry::render() const {
  // Each family's fixed series are written under mutex_, its samplers run after it is let go.
  struct Rendered {
    std::string name;
    std::string text;
    std::vector<Sampler> samplers;
  };
  std::lock_guard sampling(sampling_mutex_);
  std::vector<Rendered> rendered;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, f] : families_) {
      std::string out = "# HELP " + name + " " + escape_help(f.help) + "\n";
      out += "# TYPE " + name + " " + f.type + "\n";
      for (const auto& [key, counter] : f.counters)
        out += name + key + " " + number(counter->value()) + "\n";
      for (const auto& [key, gauge] : f.gauges)
        out += name + key + " " + number(gauge->value()) + "\n";
      for (const auto& [key, histogram] : f.histograms) {
        const Labels& labels = f.label_sets.at(key);
        Histogram::Snapshot snapshot = histogram->snapshot();
        for (size_t i = 0; i <= snapshot.upper_bounds.size(); ++i) {
          std::string le =
              i < snapshot.upper_bounds.size() ? number(snapshot.upper_bounds[i]) : "+Inf";
          out += name + "_bucket" + render_labels(labels, "le=\"" + le + "\"") + " " +
                 std::to_string(snapshot.cumulative[i]) + "\n";
        }
        out += name + "_sum" + key + " " + number(snapshot.sum) + "\n";
        out += name + "_count" + key + " " + std::to_string(snapshot.count) + "\n";
      }
      rendered.push_back({name, std::move(out), f.samplers});
    }
  }
  std::string out;
  for (const Rendered& family : rendered) {
    out += family.text;
    for (const auto& sampler : family.samplers) {
      for (const auto& [labels, value] : sampler())
        out += family.name + render_labels(labels) + " " + number(value) + "\n";
    }
  }
  return out;
}

std::vector<MetricSample> MetricsRegistry::collect(
    const std::function<bool(std::string_view)>& wanted) const {
  std::lock_guard sampling(sampling_mutex_);
  std::vector<MetricSample> out;
  std::vector<std::pair<std::string, Sampler>> samplers;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, f] : families_) {
      if (!wanted(name)) continue;
      for (const auto& [key, counter] : f.counters)
        out.push_back({name, f.label_sets.at(key), counter->value()});
      for (const auto& [key, gauge] : f.gauges)
        out.push_back({name, f.label_sets.at(key), gauge->value()});
      for (const auto& [key, histogram] : f.histograms) {
        const Labels& labels = f.label_sets.at(key);
        Histogram::Snapshot snapshot = histogram->snapshot();
        for (size_t i = 0; i <= snapshot.upper_bounds.size(); ++i) {
          Labels bucket = labels;
          bucket.emplace_back(
              "le", i < snapshot.upper_bounds.size() ? number(snapshot.upper_bounds[i]) : "+Inf");
          out.push_back({name + "_bucket", std::move(bucket), double(snapshot.cumulative[i])});
        }
        out.push_back({name + "_count", labels, double(snapshot.count)});
      }
      for (const auto& sampler : f.samplers)
        samplers.emplace_back(name, sampler);
    }
  }
  for (const auto& [name, sampler] : samplers) {
    for (auto& [labels, value] : sampler())
      out.push_back({name, std::move(labels), value});
  }
  return out;
}

}  // namespace chatflow::server
