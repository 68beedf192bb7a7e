#include "framework/server/metrics.h"

#include <gtest/gtest.h>

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

TEST(MetricsRegistry, OneNameHasOneType) {
  MetricsRegistry registry;
  registry.counter("x_total", "X.");
  EXPECT_THROW(registry.gauge("x_total", "X."), std::logic_error);
}

}  // namespace
}  // namespace chatflow::server
