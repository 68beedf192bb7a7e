#include "framework/server/server_metrics.h"

#include <cctype>

#include "framework/api/capabilities.h"
#include "framework/server/exported_metrics.h"

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
  auto per_pipeline = [&](const MetricDefinition& metric) {
    return &registry.histogram(metric, {spec.name});
  };
  time_to_first_token_ = per_pipeline(exported_metric("chatflow:time_to_first_token_seconds"));
  inter_token_ = per_pipeline(exported_metric("chatflow:inter_token_latency_seconds"));
  time_per_output_token_ =
      per_pipeline(exported_metric("chatflow:request_time_per_output_token_seconds"));
  end_to_end_ = per_pipeline(exported_metric("chatflow:e2e_request_latency_seconds"));
  queue_time_ = per_pipeline(exported_metric("chatflow:request_queue_time_seconds"));
  prefill_time_ = per_pipeline(exported_metric("chatflow:request_prefill_time_seconds"));
  decode_time_ = per_pipeline(exported_metric("chatflow:request_decode_time_seconds"));
  for (const auto& stage : spec.stages) {
    stage_duration_.push_back(&registry.histogram(
        exported_metric("chatflow:stage_duration_seconds"), {spec.name, stage.name}));
  }
  prompt_tokens_ = &registry.counter(exported_metric("chatflow:prompt_tokens_total"), {spec.name});
  generation_tokens_ =
      &registry.counter(exported_metric("chatflow:generation_tokens_total"), {spec.name});
  for (FinishReason reason :
       {FinishReason::stop, FinishReason::length, FinishReason::content_filter}) {
    success_[static_cast<size_t>(reason)] =
        &registry.counter(exported_metric("chatflow:request_success_total"),
                          {spec.name, std::string(to_string(reason))});
  }
  failed_ = &registry.counter(exported_metric("chatflow:request_failure_total"), {spec.name});
}

void RequestMetrics::observe_finished(const Request& request, const TokenTimes& times, int status) {
  // Per tenant: who is using the service, and how much.
  const std::string& tenant = request.identity.tenant;
  registry_
      .counter(exported_metric("chatflow:tenant_requests_total"), {tenant, std::to_string(status)})
      .add();
  constexpr const MetricDefinition& tenant_tokens = exported_metric("chatflow:tenant_tokens_total");
  registry_.counter(tenant_tokens, {tenant, "prompt"})
      .add(static_cast<double>(request.usage.prompt_tokens));
  registry_.counter(tenant_tokens, {tenant, "completion"})
      .add(static_cast<double>(request.usage.completion_tokens));
  // What stages noted (moderation flags, cache hits, A/B arms), with bounded labels only.
  for (const auto& [name, value] : request.annotations()) {
    registry_
        .counter(exported_metric("chatflow:request_annotations_total"),
                 {annotation_label(name), annotation_label(value)})
        .add();
  }
  // An agent's tool calls: the tool label is a declared tool's name (the pipeline's own
  // bounded set), never a name the model made up.
  for (const AgentStep& step : request.agent_steps) {
    if (step.tool.empty()) continue;
    registry_
        .counter(exported_metric("chatflow:agent_steps_total"),
                 {step.declared ? step.tool : "undeclared", annotation_label(step.status)})
        .add();
  }
  int64_t finished = request.finished_ns() > 0 ? request.finished_ns() : now_ns();
  end_to_end_->observe(seconds_between(times.received_ns, finished));
  // Per A/B arm: the numbers an experiment is judged by, side by side.
  if (auto arm = request.annotation("arm")) {
    registry_
        .counter(exported_metric("chatflow:arm_requests_total"),
                 {pipeline_, *arm, std::to_string(status)})
        .add();
    registry_.counter(exported_metric("chatflow:arm_tokens_total"), {pipeline_, *arm, "completion"})
        .add(static_cast<double>(request.usage.completion_tokens));
    registry_
        .histogram(exported_metric("chatflow:arm_e2e_request_latency_seconds"), {pipeline_, *arm})
        .observe(seconds_between(times.received_ns, finished));
    if (times.first_token_ns > 0) {
      registry_
          .histogram(exported_metric("chatflow:arm_time_to_first_token_seconds"), {pipeline_, *arm})
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
  // Delivered without the engine: a dashboard showing engine tokens alone reads 0 while a cache
  // answers hundreds a second.
  if (auto cache = request.annotation("cache")) {
    registry_
        .counter(exported_metric("chatflow:cache_served_tokens_total"),
                 {pipeline_, annotation_label(*cache)})
        .add(static_cast<double>(request.usage.completion_tokens));
  }
  if (request.error() || !request.finish_reason()) {
    failed_->add();
  } else {
    success_[static_cast<size_t>(*request.finish_reason())]->add();
  }
}

void register_engine_metrics(MetricsRegistry& registry,
                             std::vector<std::shared_ptr<const ServedModel>> models,
                             std::shared_ptr<const Pipeline> pipeline) {
  auto per_model = [&](const MetricDefinition& metric, auto value) {
    registry.sampled(metric, [models, value]() {
      std::vector<std::pair<LabelValues, double>> samples;
      for (const auto& model : models)
        samples.push_back({{model->model_id()}, value(model->engine_stats())});
      return samples;
    });
  };
  per_model(exported_metric("chatflow:num_requests_running"),
            [](const EngineStats& s) { return double(s.running); });
  per_model(exported_metric("chatflow:num_requests_waiting"),
            [](const EngineStats& s) { return double(s.waiting); });
  per_model(exported_metric("chatflow:kv_cache_usage_perc"), [](const EngineStats& s) {
    return s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / double(s.kv_blocks_total) : 0;
  });
  per_model(exported_metric("chatflow:kv_cache_blocks"),
            [](const EngineStats& s) { return double(s.kv_blocks_total); });
  per_model(exported_metric("chatflow:kv_cache_sequence_blocks"),
            [](const EngineStats& s) { return double(s.kv_blocks_sequence); });
  per_model(exported_metric("chatflow:prefix_cache_queries_total"),
            [](const EngineStats& s) { return double(s.prefix_queried_tokens); });
  per_model(exported_metric("chatflow:prefix_cache_hits_total"),
            [](const EngineStats& s) { return double(s.prefix_hit_tokens); });
  per_model(exported_metric("chatflow:engine_prompt_tokens_computed_total"),
            [](const EngineStats& s) { return double(s.prompt_tokens_computed); });
  per_model(exported_metric("chatflow:engine_generated_tokens_total"),
            [](const EngineStats& s) { return double(s.generated_tokens); });
  per_model(exported_metric("chatflow:num_preemptions_total"),
            [](const EngineStats& s) { return double(s.preemptions); });
  per_model(exported_metric("chatflow:engine_steps_total"),
            [](const EngineStats& s) { return double(s.steps); });
  per_model(exported_metric("chatflow:spec_decode_num_draft_tokens_total"),
            [](const EngineStats& s) { return double(s.draft_tokens); });
  per_model(exported_metric("chatflow:spec_decode_num_accepted_tokens_total"),
            [](const EngineStats& s) { return double(s.accepted_tokens); });
  registry.sampled(exported_metric("chatflow:engine_backend_info"), [models]() {
    std::vector<std::pair<LabelValues, double>> samples;
    for (const auto& model : models) {
      EngineStats stats = model->engine_stats();
      if (!stats.backend.empty())
        samples.push_back({{model->model_id(), stats.backend, stats.device}, 1.0});
    }
    return samples;
  });
  registry.sampled(exported_metric("chatflow:engine_backend_memory_bytes"), [models]() {
    std::vector<std::pair<LabelValues, double>> samples;
    for (const auto& model : models) {
      EngineStats stats = model->engine_stats();
      if (stats.backend.empty()) continue;
      samples.push_back({{model->model_id(), "weights"}, double(stats.weight_bytes)});
      samples.push_back({{model->model_id(), "kv_pool"}, double(stats.kv_pool_bytes)});
      samples.push_back({{model->model_id(), "workspace"}, double(stats.workspace_bytes)});
    }
    return samples;
  });
  std::vector<const StorageHealth*> stores;
  for (StorageHealth* store : pipeline->find_all<StorageHealth>())
    stores.push_back(store);
  registry.sampled(exported_metric("chatflow:storage_lost_writes_total"), [pipeline, stores]() {
    std::vector<std::pair<LabelValues, double>> samples;
    for (const StorageHealth* store : stores) {
      StorageStatus status = store->storage_status();
      samples.push_back({{status.store}, double(status.lost_writes)});
    }
    return samples;
  });
  std::string name = pipeline->spec().name;
  registry.sampled(exported_metric("chatflow:requests_in_flight"), [pipeline, name]() {
    return std::vector<std::pair<LabelValues, double>>{
        {{name}, double(pipeline->active_requests())}};
  });
}

}  // namespace chatflow::server
