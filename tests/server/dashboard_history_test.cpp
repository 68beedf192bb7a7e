#include "framework/server/dashboard_history.h"

#include <chrono>
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace chatflow::server {
namespace {

namespace json = boost::json;

std::vector<MetricSample> requests_counted(double value) {
  return {
      {"chatflow:request_success_total", {{"pipeline", "p"}, {"finished_reason", "stop"}}, value}};
}

json::object history_json(const DashboardHistory& history, std::string_view range,
                          int64_t after = 0) {
  auto text = history.json(range, after);
  EXPECT_TRUE(text.has_value()) << range;
  return json::parse(text.value_or("{}")).as_object();
}

std::vector<int64_t> times_of(const json::object& body) {
  std::vector<int64_t> times;
  for (const auto& sample : body.at("samples").as_array())
    times.push_back(sample.at("t").as_int64());
  return times;
}

// Seven hours of a sample every 5 s: each range holds its latest 180 points, one per its step.
TEST(DashboardHistory, EachRangeKeepsItsLatestPointsOnePerStep) {
  DashboardHistory history;
  const int64_t start = 1'700'000'040'000;  // a multiple of 120 s
  const int64_t last = start + 7 * 3600 * 1000;
  for (int64_t t = start; t <= last; t += 5000)
    history.record(t, requests_counted(double(t - start) / 5000));
  struct Expected {
    std::string_view range;
    int64_t step_ms;
  };
  for (Expected expected : {Expected{"15m", 5000}, Expected{"1h", 20000}, Expected{"6h", 120000}}) {
    SCOPED_TRACE(expected.range);
    EXPECT_EQ(history.points(expected.range), 180u);
    std::vector<int64_t> times = times_of(history_json(history, expected.range));
    ASSERT_EQ(times.size(), 180u);
    EXPECT_EQ(times.back(), last);
    for (size_t i = 1; i < times.size(); ++i)
      ASSERT_EQ(times[i] - times[i - 1], expected.step_ms) << "at point " << i;
  }
  // A counter stays cumulative in the coarse range: its value is the count at that time.
  json::object six_hours = history_json(history, "6h");
  const json::object& oldest = six_hours.at("samples").as_array().front().as_object();
  EXPECT_EQ(oldest.at("values").as_array()[0].to_number<double>(),
            double(oldest.at("t").as_int64() - start) / 5000);
}

TEST(DashboardHistory, ASecondSampleWithinAStepIsLeftOutOfTheCoarserRanges) {
  DashboardHistory history;
  history.record(1'000'000'020'000, requests_counted(1));
  history.record(1'000'000'025'000, requests_counted(2));  // the same 20 s and 2 min step
  history.record(1'000'000'040'000, requests_counted(3));  // a new 20 s step
  EXPECT_EQ(history.points("15m"), 3u);
  EXPECT_EQ(history.points("1h"), 2u);
  EXPECT_EQ(history.points("6h"), 1u);
}

TEST(DashboardHistory, AfterGivesOnlyLaterPointsAndASeriesBornLaterIsNullBefore) {
  DashboardHistory history;
  history.record(10'000, requests_counted(1));
  auto both = requests_counted(2);
  both.push_back({"chatflow:http_requests_total",
                  {{"endpoint", "/v1/chat/completions"}, {"status", "429"}},
                  4});
  history.record(15'000, both);
  json::object all = history_json(history, "15m");
  ASSERT_EQ(all.at("series").as_array().size(), 2u);
  EXPECT_EQ(all.at("series").as_array()[1].at("labels").at("status").as_string(), "429");
  const json::array& samples = all.at("samples").as_array();
  ASSERT_EQ(samples.size(), 2u);
  ASSERT_EQ(samples[0].at("values").as_array().size(), 2u);
  EXPECT_TRUE(samples[0].at("values").as_array()[1].is_null());
  EXPECT_EQ(samples[1].at("values").as_array()[1].to_number<double>(), 4);
  EXPECT_EQ(times_of(history_json(history, "15m", 10'000)), std::vector<int64_t>{15'000});
  EXPECT_FALSE(history.json("2h", 0).has_value());
}

TEST(DashboardHistory, SeriesPastTheBoundAreDroppedAndCounted) {
  DashboardHistory history;
  std::vector<MetricSample> many;
  for (size_t i = 0; i < DashboardHistory::kMaxSeries + 10; ++i)
    many.push_back({"chatflow:tenant_requests_total", {{"tenant", "t" + std::to_string(i)}}, 1});
  history.record(5'000, many);
  history.record(10'000, many);
  EXPECT_EQ(history.series(), DashboardHistory::kMaxSeries);
  json::object body = history_json(history, "15m");
  EXPECT_EQ(body.at("series").as_array().size(), DashboardHistory::kMaxSeries);
  EXPECT_EQ(body.at("samples").as_array()[1].at("values").as_array().size(),
            DashboardHistory::kMaxSeries);
  EXPECT_EQ(body.at("dropped_series").as_int64(), 20);
}

TEST(DashboardHistory, KeepsOnlyTheFamiliesTheDashboardDraws) {
  EXPECT_TRUE(DashboardHistory::kept_family("chatflow:http_requests_total"));
  EXPECT_TRUE(DashboardHistory::kept_family("chatflow:cache_served_tokens_total"));
  EXPECT_TRUE(DashboardHistory::kept_family("chatflow:num_preemptions_total"));
  EXPECT_FALSE(DashboardHistory::kept_family("chatflow:engine_backend_info"));
  EXPECT_FALSE(DashboardHistory::kept_family("chatflow:trace_spans_exported_total"));
}

// With a registry it samples by itself from the start: a histogram as its buckets and count.
TEST(DashboardHistory, SamplesTheRegistryAtOnceOnItsOwnThread) {
  MetricsRegistry metrics;
  metrics.counter("chatflow:http_requests_total", "h", {{"endpoint", "/x"}, {"status", "200"}})
      .add(3);
  metrics.histogram("chatflow:e2e_request_latency_seconds", "h", {0.1, 1}, {{"pipeline", "p"}})
      .observe(0.5);
  metrics.counter("chatflow:engine_steps_total", "not drawn").add(1);
  DashboardHistory history(metrics);
  for (int i = 0; i < 200 && history.points("15m") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  json::object body = history_json(history, "15m");
  std::map<std::string, double> values;
  const json::array& series = body.at("series").as_array();
  const json::array& first = body.at("samples").as_array().at(0).at("values").as_array();
  for (size_t i = 0; i < series.size(); ++i) {
    std::string key(series[i].at("name").as_string());
    if (auto le = series[i].at("labels").as_object().if_contains("le"))
      key += "{le=" + std::string(le->as_string()) + "}";
    values[key] = first[i].to_number<double>();
  }
  EXPECT_EQ(values["chatflow:http_requests_total"], 3);
  EXPECT_EQ(values["chatflow:e2e_request_latency_seconds_bucket{le=0.1}"], 0);
  EXPECT_EQ(values["chatflow:e2e_request_latency_seconds_bucket{le=1}"], 1);
  EXPECT_EQ(values["chatflow:e2e_request_latency_seconds_bucket{le=+Inf}"], 1);
  EXPECT_EQ(values["chatflow:e2e_request_latency_seconds_count"], 1);
  EXPECT_EQ(values.count("chatflow:engine_steps_total"), 0u);
  EXPECT_EQ(values.size(), 5u);
}

}  // namespace
}  // namespace chatflow::server
