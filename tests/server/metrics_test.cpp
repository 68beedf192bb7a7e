#include "framework/server/metrics.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "framework/server/exported_metrics.h"

namespace chatflow::server {
namespace {

TEST(MetricsRegistry, RendersCountersGaugesAndEscapedLabels) {
  MetricsRegistry registry;
  registry.counter("app_requests_total", "Requests.", {{"path", "/a\"b\\c\nd"}}).add(2);
  registry.counter("app_requests_total", "Requests.", {{"path", "/a\"b\\c\nd"}}).add();
  registry.gauge("app_temperature", "Heat.\nTwo lines.").set(-1.5);
  std::string text = registry.render();
  EXPECT_NE(text.find("# TYPE app_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("app_requests_total{path=\"/a\\\"b\\\\c\\nd\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# HELP app_temperature Heat.\\nTwo lines.\n"), std::string::npos) << text;
  EXPECT_NE(text.find("app_temperature -1.5\n"), std::string::npos) << text;
}

TEST(MetricsRegistry, HistogramBucketsAreCumulativeWithInfAndSum) {
  MetricsRegistry registry;
  Histogram& histogram = registry.histogram("lat_seconds", "Latency.", {0.1, 1.0}, {{"p", "x"}});
  for (double value : {0.05, 0.1, 0.5, 2.0, 3.0})
    histogram.observe(value);
  std::string text = registry.render();
  EXPECT_NE(text.find("lat_seconds_bucket{p=\"x\",le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_bucket{p=\"x\",le=\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_bucket{p=\"x\",le=\"+Inf\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_sum{p=\"x\"} 5.65\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_count{p=\"x\"} 5\n"), std::string::npos) << text;
}

TEST(MetricsRegistry, SampledValuesAreReadAtScrapeTime) {
  MetricsRegistry registry;
  double running = 1;
  registry.sampled("engine_running", "gauge", "Running.", [&] {
    return std::vector<std::pair<Labels, double>>{{{{"model_name", "m"}}, running}};
  });
  EXPECT_NE(registry.render().find("engine_running{model_name=\"m\"} 1\n"), std::string::npos);
  running = 4;
  EXPECT_NE(registry.render().find("engine_running{model_name=\"m\"} 4\n"), std::string::npos);
}

// The model router's samplers take the router's lock, and the router counts loads into the
// registry while holding it: a scrape (render or collect) that ran samplers under the
// registry's own lock deadlocked with a load or unload. Both sides must finish.
TEST(MetricsRegistry, ASamplerMayTakeALockWhoseHolderCountsIntoTheRegistry) {
  for (bool rendering : {true, false}) {
    // On the heap and shared with the threads: if they deadlock, the test fails and leaves them
    // blocked on objects that stay alive.
    struct Shared {
      MetricsRegistry registry;
      std::mutex router;
      std::atomic<bool> sampling{false}, counted{false}, scraped{false};
    };
    auto shared = std::make_shared<Shared>();
    shared->registry.sampled("app_models", "gauge", "Models.", [raw = shared.get()] {
      raw->sampling = true;
      std::lock_guard lock(raw->router);
      return std::vector<std::pair<Labels, double>>{{{}, 1.0}};
    });
    std::unique_lock holding(shared->router);
    std::thread([shared, rendering] {
      if (rendering)
        shared->registry.render();
      else
        shared->registry.collect([](std::string_view) { return true; });
      shared->scraped = true;
    }).detach();
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!shared->sampling && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(shared->sampling) << "the scrape never reached the sampler";
    // The router, holding its lock, counts a load.
    std::thread([shared] {
      shared->registry.counter("app_loads_total", "Loads.").add();
      shared->counted = true;
    }).detach();
    while (!shared->counted && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(shared->counted) << "counting under the router's lock waited for the scrape ("
                                 << (rendering ? "render" : "collect") << ")";
    holding.unlock();
    while (!shared->scraped && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(shared->scraped);
  }
}

TEST(MetricsRegistry, OneNameHasOneType) {
  MetricsRegistry registry;
  registry.counter("x_total", "X.");
  EXPECT_THROW(registry.gauge("x_total", "X."), std::logic_error);
}

constexpr MetricDefinition kArmRequests{"app_arm_requests_total", MetricType::counter,
                                        {"pipeline", "arm"},      "Requests by arm.",
                                        MetricBuckets::none,      "Test"};
constexpr MetricDefinition kWait{"app_wait_seconds", MetricType::histogram,        {},
                                 "Waiting.",         MetricBuckets::token_latency, "Test"};
constexpr MetricDefinition kRunning{"app_running", MetricType::gauge,   {"model_name"},
                                    "Running.",    MetricBuckets::none, "Test"};

TEST(MetricsRegistry, ADefinedMetricTakesItsLabelNamesFromTheDefinition) {
  MetricsRegistry registry;
  registry.counter(kArmRequests, {"chat", "b"}).add(2);
  std::string text = registry.render();
  EXPECT_NE(text.find("# HELP app_arm_requests_total Requests by arm.\n"), std::string::npos);
  EXPECT_NE(text.find("app_arm_requests_total{pipeline=\"chat\",arm=\"b\"} 2\n"), std::string::npos)
      << text;
}

TEST(MetricsRegistry, ADefinedMetricRefusesLabelValuesItsDefinitionDoesNotName) {
  MetricsRegistry registry;
  EXPECT_THROW(registry.counter(kArmRequests, {"chat"}), std::logic_error);
  EXPECT_THROW(registry.counter(kArmRequests, {"chat", "b", "200"}), std::logic_error);
  EXPECT_THROW(registry.gauge(kArmRequests, {"chat", "b"}), std::logic_error);
}

TEST(MetricsRegistry, ADefinedHistogramHasItsDefinitionsBuckets) {
  MetricsRegistry registry;
  registry.histogram(kWait).observe(0.003);
  std::string text = registry.render();
  EXPECT_NE(text.find("app_wait_seconds_bucket{le=\"0.0025\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("app_wait_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("app_wait_seconds_bucket{le=\"10\"} 1\n"), std::string::npos) << text;
}

TEST(MetricsRegistry, ADefinedSampledMetricNamesItsSamplesLabels) {
  MetricsRegistry registry;
  registry.sampled(kRunning, [] {
    return std::vector<std::pair<LabelValues, double>>{{{"m"}, 3}};
  });
  std::string text = registry.render();
  EXPECT_NE(text.find("# TYPE app_running gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("app_running{model_name=\"m\"} 3\n"), std::string::npos) << text;
}

TEST(ExportedMetrics, EveryMetricIsFoundByItsNameWithItsLabels) {
  constexpr const MetricDefinition& tenant_tokens = exported_metric("chatflow:tenant_tokens_total");
  EXPECT_EQ(tenant_tokens.type, MetricType::counter);
  EXPECT_EQ(tenant_tokens.label_count(), 2u);
  EXPECT_EQ(tenant_tokens.labels[0], "tenant");
  EXPECT_EQ(tenant_tokens.labels[1], "kind");
  EXPECT_EQ(exported_metric("chatflow:http_open_connections").label_count(), 0u);
  // vLLM's names and those the issue found missing from the docs.
  for (std::string_view name :
       {"chatflow:time_to_first_token_seconds", "chatflow:engine_steps_total",
        "chatflow:engine_prompt_tokens_computed_total", "chatflow:kv_cache_blocks",
        "chatflow:tenant_requests_total"}) {
    EXPECT_TRUE(std::any_of(kExportedMetrics.begin(), kExportedMetrics.end(),
                            [&](const MetricDefinition& metric) { return metric.name == name; }))
        << name;
  }
}

}  // namespace
}  // namespace chatflow::server
