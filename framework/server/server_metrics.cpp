#include "framework/server/server_metrics.h"

#include <cctype>

#include "framework/api/capabilities.h"

namespace chatflow::server {
namespace {

// A stage's note as a label value: a word such as "exact" or "flagged:injection_en" passes; a
// value with digits or free text ("trimmed 3 turns", "17", a plugin's sentence) becomes "other",
// so no request can add a series of its own.
std::string annotation_label(const std::string& value) {
  constexpr size_t kLongest = 48;
  bool word = !value.empty() && value.size() <= kLongest;
  for (char c : value) {
    word = word && (std::islower(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
                    c == '-' || c == '.');
  }
  return word ? value : "other";
}

double seconds_between(int64_t from_ns, int64_t to_ns) {
  return static_cast<double>(to_ns - from_ns) / 1e9;
}

}  // namespace

RequestMetrics::RequestMetrics(MetricsRegistry& registry, const PipelineSpec& spec)
    : registry_(registry), pipeline_(spec.name) {
  Labels labels{{"pipeline", spec.name}};
  auto latency = [&](const char* name, const char* help) {
    return &registry.histogram(name, help, latency_buckets(), labels);
  };
  time_to_first_token_ =
      &registry.histogram("chatflow:time_to_first_token_seconds",
                          "From the HTTP request read to its first token leaving the pipeline.",
                          token_latency_buckets(), labels);
  inter_token_ = &registry.histogram("chatflow:inter_token_latency_seconds",
                                     "Between consecutive token chunks of one stream.",
                                     token_latency_buckets(), labels);
  time_per_output_token_ = &registry.histogram(
      "chatflow:request_time_per_output_token_seconds",
      "Per request: (end-to-end time - time to first token) / (output tokens - 1).",
      token_latency_buckets(), labels);
  end_to_end_ = latency("chatflow:e2e_request_latency_seconds",
                        "From the HTTP request read to its last chunk or error.");
  queue_time_ = latency("chatflow:request_queue_time_seconds",
                        "Time a generation waited in the engine's queue.");
  prefill_time_ = latency("chatflow:request_prefill_time_seconds",
                          "From the engine scheduling a generation to its first token.");
  decode_time_ = latency("chatflow:request_decode_time_seconds",
                         "From the first token to the end of generation.");
  for (const auto& stage : spec.stages) {
    stage_duration_.push_back(&registry.histogram(
        "chatflow:stage_duration_seconds",
        "Time each stage spent on one request (stream stages: summed over its chunks).",
        stage_latency_buckets(), {{"pipeline", spec.name}, {"stage", stage.name}}));
  }
  prompt_tokens_ = &registry.counter("chatflow:prompt_tokens_total",
                                     "Prompt tokens of finished requests.", labels);
  generation_tokens_ = &registry.counter("chatflow:generation_tokens_total",
                                         "Tokens generated for finished requests.", labels);
  for (FinishReason reason :
       {FinishReason::stop, FinishReason::length, FinishReason::content_filter}) {
    success_[static_cast<size_t>(reason)] = &registry.counter(
        "chatflow:request_success_total", "Requests that finished, by finish reason.",
        {{"pipeline", spec.name}, {"finished_reason", std::string(to_string(reason))}});
  }
  failed_ = &registry.counter("chatflow:request_failure_total",
                              "Requests that ended with an error or were cancelled.", labels);
}

void RequestMetrics::observe_finished(const Request& request, const TokenTimes& times, int status) {
  // Per tenant: who is using the service, and how much.
  const std::string& tenant = request.identity.tenant;
  registry_
      .counter("chatflow:tenant_requests_total", "Requests answered, by tenant and HTTP status.",
               {{"tenant", tenant}, {"status", std::to_string(status)}})
      .add();
  registry_
      .counter("chatflow:tenant_tokens_total", "Tokens used, by tenant and kind.",
               {{"tenant", tenant}, {"kind", "prompt"}})
      .add(static_cast<double>(request.usage.prompt_tokens));
  registry_
      .counter("chatflow:tenant_tokens_total", "Tokens used, by tenant and kind.",
               {{"tenant", tenant}, {"kind", "completion"}})
      .add(static_cast<double>(request.usage.completion_tokens));
  // What stages noted (moderation flags, cache hits, A/B arms), with bounded labels only.
  for (const auto& [name, value] : request.annotations()) {
    registry_
        .counter("chatflow:request_annotations_total",
                 "Notes stages left on requests (e.g. moderation=flagged:injection_en).",
                 {{"name", annotation_label(name)}, {"value", annotation_label(value)}})
        .add();
  }
  // An agent's tool calls: the tool label is a declared tool's name (the pipeline's own
  // bounded set), never a name the model made up.
  for (const AgentStep& step : request.agent_steps) {
    if (step.tool.empty()) continue;
    registry_
        .counter("chatflow:agent_steps_total", "Tool calls of agent loops, by tool and outcome.",
                 {{"tool", step.declared ? step.tool : "undeclared"},
                  {"status", annotation_label(step.status)}})
        .add();
  }
  int64_t finished = request.finished_ns() > 0 ? request.finished_ns() : now_ns();
  end_to_end_->observe(seconds_between(times.received_ns, finished));
  // Per A/B arm: the numbers an experiment is judged by, side by side.
  if (auto arm = request.annotation("arm")) {
    registry_
        .counter("chatflow:arm_requests_total", "Requests answered, by A/B arm and HTTP status.",
                 {{"pipeline", pipeline_}, {"arm", *arm}, {"status", std::to_string(status)}})
        .add();
    registry_
        .counter("chatflow:arm_tokens_total", "Tokens used, by A/B arm and kind.",
                 {{"pipeline", pipeline_}, {"arm", *arm}, {"kind", "completion"}})
        .add(static_cast<double>(request.usage.completion_tokens));
    registry_
        .histogram("chatflow:arm_e2e_request_latency_seconds",
                   "From the HTTP request read to its last chunk or error, by A/B arm.",
                   latency_buckets(), {{"pipeline", pipeline_}, {"arm", *arm}})
        .observe(seconds_between(times.received_ns, finished));
    if (times.first_token_ns > 0) {
      registry_
          .histogram("chatflow:arm_time_to_first_token_seconds",
                     "From the HTTP request read to its first token, by A/B arm.",
                     token_latency_buckets(), {{"pipeline", pipeline_}, {"arm", *arm}})
          .observe(seconds_between(times.received_ns, times.first_token_ns));
    }
  }
  if (times.first_token_ns > 0) {
    time_to_first_token_->observe(seconds_between(times.received_ns, times.first_token_ns));
    int64_t tokens = request.usage.completion_tokens;
    if (tokens > 1) {
      time_per_output_token_->observe(seconds_between(times.first_token_ns, times.last_token_ns) /
                                      static_cast<double>(tokens - 1));
    }
  }
  const GenerationTimes& generation = request.generation_times;
  int64_t queued = generation.queued_ns.load();
  int64_t scheduled = generation.scheduled_ns.load();
  int64_t first = generation.first_token_ns.load();
  int64_t done = generation.finished_ns.load();
  if (queued > 0 && scheduled >= queued) queue_time_->observe(seconds_between(queued, scheduled));
  if (scheduled > 0 && first >= scheduled)
    prefill_time_->observe(seconds_between(scheduled, first));
  if (first > 0 && done >= first) decode_time_->observe(seconds_between(first, done));
  auto timings = request.stage_timings();
  for (size_t i = 0; i < timings.size() && i < stage_duration_.size(); ++i) {
    if (timings[i].calls > 0)
      stage_duration_[i]->observe(static_cast<double>(timings[i].busy_ns) / 1e9);
  }
  prompt_tokens_->add(static_cast<double>(request.usage.prompt_tokens));
  generation_tokens_->add(static_cast<double>(request.usage.completion_tokens));
  if (request.error() || !request.finish_reason()) {
    failed_->add();
  } else {
    success_[static_cast<size_t>(*request.finish_reason())]->add();
  }
}

void register_engine_metrics(MetricsRegistry& registry,
                             std::vector<std::shared_ptr<const ServedModel>> models,
                             std::shared_ptr<const Pipeline> pipeline) {
  auto each_model = [models](auto value) {
    return [models, value]() {
      std::vector<std::pair<Labels, double>> samples;
      for (const auto& model : models) {
        EngineStats stats = model->engine_stats();
        samples.push_back({{{"model_name", model->model_id()}}, value(stats)});
      }
      return samples;
    };
  };
  auto gauge = [&](const char* name, const char* help, auto value) {
    registry.sampled(name, "gauge", help, each_model(value));
  };
  auto counter = [&](const char* name, const char* help, auto value) {
    registry.sampled(name, "counter", help, each_model(value));
  };
  gauge("chatflow:num_requests_running", "Sequences the engine is generating.",
        [](const EngineStats& s) { return double(s.running); });
  gauge("chatflow:num_requests_waiting", "Sequences queued for the engine.",
        [](const EngineStats& s) { return double(s.waiting); });
  gauge("chatflow:kv_cache_usage_perc",
        "Fraction of KV-cache blocks in use (cached blocks no sequence uses count as free).",
        [](const EngineStats& s) {
          return s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / double(s.kv_blocks_total) : 0;
        });
  gauge("chatflow:kv_cache_blocks", "KV-cache blocks in the pool.",
        [](const EngineStats& s) { return double(s.kv_blocks_total); });
  gauge("chatflow:kv_cache_sequence_blocks",
        "KV-cache block references held by live sequences (0 when nothing runs).",
        [](const EngineStats& s) { return double(s.kv_blocks_sequence); });
  counter("chatflow:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          [](const EngineStats& s) { return double(s.prefix_queried_tokens); });
  counter("chatflow:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          [](const EngineStats& s) { return double(s.prefix_hit_tokens); });
  counter("chatflow:engine_prompt_tokens_computed_total",
          "Prompt tokens the engine ran through the model (prefix-cache hits excluded).",
          [](const EngineStats& s) { return double(s.prompt_tokens_computed); });
  counter("chatflow:engine_generated_tokens_total", "Tokens the engine sampled.",
          [](const EngineStats& s) { return double(s.generated_tokens); });
  counter("chatflow:num_preemptions_total", "Sequences preempted for lack of KV blocks.",
          [](const EngineStats& s) { return double(s.preemptions); });
  counter("chatflow:engine_steps_total", "Batched forward passes.",
          [](const EngineStats& s) { return double(s.steps); });
  std::vector<const StorageHealth*> stores;
  for (StorageHealth* store : pipeline->find_all<StorageHealth>())
    stores.push_back(store);
  registry.sampled("chatflow:storage_lost_writes_total", "counter",
                   "Rows or turns a store could not write (a full disk, a file gone read-only).",
                   [pipeline, stores]() {
                     std::vector<std::pair<Labels, double>> samples;
                     for (const StorageHealth* store : stores) {
                       StorageStatus status = store->storage_status();
                       samples.push_back({{{"store", status.store}}, double(status.lost_writes)});
                     }
                     return samples;
                   });
  std::string name = pipeline->spec().name;
  registry.sampled("chatflow:requests_in_flight", "gauge",
                   "Requests admitted to the pipeline and not finished.", [pipeline, name]() {
                     return std::vector<std::pair<Labels, double>>{
                         {{{"pipeline", name}}, double(pipeline->active_requests())}};
                   });
}

}  // namespace chatflow::server
