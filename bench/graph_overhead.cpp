// chatflow bench-graph: the runtime's own cost per request through a chain of no-op stages,
// measured side by side with a bare chain of oneTBB function_nodes in the same run (the
// machines are shared and noisy, so only the ratio between the two is meaningful).
//
// Both chains run a closed loop: each finished request submits the next one, keeping a fixed
// number in flight. Latency is submit-to-finish of each request; per hop is latency / stages.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <tbb/flow_graph.h>

#include "framework/api/sink.h"
#include "framework/cli/command.h"
#include "framework/runtime/pipeline.h"

namespace chatflow::cli {
namespace {

struct BenchGraphOptions {
  int stages = 12;
  int requests = 200000;
  std::vector<int> in_flight = {1, 64};
  bool json = false;
};

class NoopStage final : public RequestStage {
 public:
  Route process(Request&, StageIo&) override { return Route::to(0); }
};

// Ends the chain: answers with one empty final chunk, as a cache hit would.
class NoopAnswerStage final : public RequestStage {
 public:
  Route process(Request&, StageIo& io) override {
    io.open_stream(0).finish(FinishReason::stop);
    return Route::streaming();
  }
};

Registry bench_registry() {
  Registry registry;
  StageTypeBuilder<NoConfig> noop("noop", StageKind::request, "passes the request on");
  noop.port("out", PortKind::request, "the request");
  noop.create([](const NoConfig&, StageContext&) { return std::make_unique<NoopStage>(); });
  registry.add(noop.build());
  StageTypeBuilder<NoConfig> answer("noop_answer", StageKind::request,
                                    "answers with an empty stream");
  answer.port("out", PortKind::stream, "one final chunk");
  answer.create([](const NoConfig&, StageContext&) { return std::make_unique<NoopAnswerStage>(); });
  registry.add(answer.build());
  return registry;
}

struct Measurement {
  double requests_per_second = 0;
  double median_latency_ns = 0;
  double p99_latency_ns = 0;
};

// Counts finished requests and wakes the measuring thread when all are done.
class Completion {
 public:
  explicit Completion(int64_t total) : total_(total), latencies_(static_cast<size_t>(total)) {}

  // Returns false when this was the last request.
  bool record(int64_t latency_ns) {
    int64_t index = done_.fetch_add(1, std::memory_order_relaxed);
    latencies_[static_cast<size_t>(index)] = latency_ns;
    if (index + 1 < total_) return true;
    std::lock_guard lock(mutex_);
    finished_ = true;
    all_done_.notify_all();
    return false;
  }
  bool claim_next() { return issued_.fetch_add(1, std::memory_order_relaxed) < total_; }

  Measurement wait(int64_t started_ns) {
    std::unique_lock lock(mutex_);
    all_done_.wait(lock, [this] { return finished_; });
    double seconds = static_cast<double>(now_ns() - started_ns) / 1e9;
    std::sort(latencies_.begin(), latencies_.end());
    return {static_cast<double>(total_) / seconds,
            static_cast<double>(latencies_[latencies_.size() / 2]),
            static_cast<double>(latencies_[latencies_.size() * 99 / 100])};
  }

 private:
  int64_t total_;
  std::vector<int64_t> latencies_;
  std::atomic<int64_t> done_{0};
  std::atomic<int64_t> issued_{0};
  std::mutex mutex_;
  std::condition_variable all_done_;
  bool finished_ = false;
};

class LoopSink final : public Sink {
 public:
  LoopSink(Pipeline& pipeline, Completion& completion)
      : pipeline_(pipeline), completion_(completion) {}

  void on_chunk(Request&, const Chunk&) override {}
  void on_finish(Request& request) override {
    if (request.error()) {
      std::fprintf(stderr, "bench request failed: %s\n", request.error()->message.c_str());
    }
    if (completion_.record(request.finished_ns() - request.submitted_ns())) submit_next();
  }

  void submit_next() {
    if (!completion_.claim_next()) return;
    auto request = std::make_shared<Request>();
    request->sink = self_.lock();
    if (pipeline_.submit(std::move(request)) != Admission::accepted) {
      std::fprintf(stderr, "bench request was not admitted\n");
      std::abort();
    }
  }
  void set_self(std::weak_ptr<LoopSink> self) { self_ = std::move(self); }

 private:
  Pipeline& pipeline_;
  Completion& completion_;
  std::weak_ptr<LoopSink> self_;
};

Measurement measure_pipeline(Pipeline& pipeline, int64_t requests, int in_flight) {
  Completion completion(requests);
  auto sink = std::make_shared<LoopSink>(pipeline, completion);
  sink->set_self(sink);
  int64_t started = now_ns();
  for (int i = 0; i < in_flight; ++i)
    sink->submit_next();
  return completion.wait(started);
}

Measurement measure_bare_chain(int stages, int64_t requests, int in_flight) {
  Completion completion(requests);
  tbb::flow::graph graph;
  using Node = tbb::flow::function_node<int64_t, int64_t>;
  std::vector<std::unique_ptr<Node>> chain;
  for (int i = 0; i < stages; ++i) {
    chain.push_back(
        std::make_unique<Node>(graph, tbb::flow::unlimited, [](int64_t start) { return start; }));
    if (i > 0) tbb::flow::make_edge(*chain[i - 1], *chain[i]);
  }
  auto submit_next = [&] {
    if (completion.claim_next()) chain.front()->try_put(now_ns());
  };
  tbb::flow::function_node<int64_t> finish(graph, tbb::flow::unlimited, [&](int64_t start) {
    if (completion.record(now_ns() - start)) submit_next();
  });
  tbb::flow::make_edge(*chain.back(), finish);
  int64_t started = now_ns();
  for (int i = 0; i < in_flight; ++i)
    submit_next();
  Measurement result = completion.wait(started);
  graph.wait_for_all();
  return result;
}

std::string chain_yaml(int stages) {
  std::string yaml = "version: 1\nname: bench\nmax_in_flight: 1000000\nstages:\n";
  for (int i = 0; i + 1 < stages; ++i)
    yaml += "  - {name: s" + std::to_string(i) + ", type: noop}\n";
  yaml += "  - {name: answer, type: noop_answer}\n";
  return yaml;
}

int bench_graph_command(const BenchGraphOptions& options) {
  Registry registry = bench_registry();
  Diagnostics diagnostics;
  auto spec = parse_pipeline_yaml(chain_yaml(options.stages), "bench.yaml", registry, diagnostics);
  auto pipeline = spec ? Pipeline::build(std::move(*spec), diagnostics) : nullptr;
  if (!pipeline) {
    std::cerr << diagnostics.to_string();
    return 1;
  }
  int64_t warmup = std::max<int64_t>(1000, options.requests / 10);
  if (!options.json) {
    std::printf("runtime overhead: %d no-op stages, %d requests per row, closed loop\n\n",
                options.stages, options.requests);
    std::printf("%9s | %14s %14s %12s | %14s %14s | %s\n", "in flight", "chatflow req/s",
                "median ns/hop", "p99 ns/hop", "bare req/s", "median ns/hop", "chatflow/bare time");
  } else {
    std::printf("{\"stages\": %d, \"requests\": %d, \"results\": [", options.stages,
                options.requests);
  }
  bool first = true;
  for (int in_flight : options.in_flight) {
    measure_pipeline(*pipeline, warmup, in_flight);
    measure_bare_chain(options.stages, warmup, in_flight);
    Measurement ours = measure_pipeline(*pipeline, options.requests, in_flight);
    Measurement bare = measure_bare_chain(options.stages, options.requests, in_flight);
    double ours_hop = ours.median_latency_ns / options.stages;
    double bare_hop = bare.median_latency_ns / options.stages;
    if (!options.json) {
      std::printf("%9d | %14.0f %14.1f %12.1f | %14.0f %14.1f | %.2f\n", in_flight,
                  ours.requests_per_second, ours_hop, ours.p99_latency_ns / options.stages,
                  bare.requests_per_second, bare_hop,
                  bare.requests_per_second / ours.requests_per_second);
    } else {
      std::printf(
          "%s{\"in_flight\": %d, \"chatflow_requests_per_s\": %.0f, "
          "\"chatflow_median_ns_per_hop\": %.1f, "
          "\"chatflow_p99_ns_per_hop\": %.1f, \"bare_requests_per_s\": %.0f, "
          "\"bare_median_ns_per_hop\": %.1f}",
          first ? "" : ", ", in_flight, ours.requests_per_second, ours_hop,
          ours.p99_latency_ns / options.stages, bare.requests_per_second, bare_hop);
    }
    first = false;
  }
  if (options.json) std::printf("]}\n");
  return 0;
}

}  // namespace

void add_bench_graph_command(CLI::App& app, CommandBody& selected) {
  auto options = std::make_shared<BenchGraphOptions>();
  auto* command = app.add_subcommand(
      "bench-graph", "Measure the runtime's own overhead through a chain of no-op stages");
  command->add_option("--stages", options->stages, "stages in the chain")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  command->add_option("--requests", options->requests, "requests per measurement")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  command->add_option("--in-flight", options->in_flight, "requests kept in flight")
      ->delimiter(',')
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  command->add_flag("--json", options->json, "print JSON instead of a table");
  command->callback(
      [&selected, options] { selected = [options] { return bench_graph_command(*options); }; });
}

}  // namespace chatflow::cli
