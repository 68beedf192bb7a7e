// Every metric the server exports at GET /metrics, in one table. The code that registers a
// metric names it with exported_metric("chatflow:..."), which does not compile for a name that is
// not here, and takes its type, help and label names from here; `chatflow stages
// --metrics-markdown` writes docs/reference/metrics.md from the same table. So /metrics and the
// reference cannot disagree. Names follow vLLM's, under a chatflow: prefix.
#pragma once

#include <array>
#include <string_view>

#include "framework/server/metrics.h"

namespace chatflow::server {

// The headings the reference lists metrics under, in order, each with when its series exist.
struct MetricGroup {
  std::string_view name;
  std::string_view doc;
};

inline constexpr std::array kMetricGroups = std::to_array<MetricGroup>({
    {"Requests", "One series per pipeline (and per stage of it), from the moment it is served."},
    {"Tenants and stages",
     "Per tenant (as the `auth` stage identified the caller; empty without it), per note a stage "
     "left on a "
     "request (a word such as `exact` or `flagged:injection_en`; any other value is counted as "
     "`other`), per agent tool call."},
    {"A/B experiments",
     "Per arm of an `ab_split` stage (the `arm` annotation), beside the pipeline's own series."},
    {"Engine",
     "One series per model resource the pipeline serves (`model_name`: the id the API reports), "
     "read from the engine at each scrape."},
    {"Storage",
     "Per store that writes in the background: `usage` (the quota stage's ledger) and `history` "
     "(a history_store resource)."},
    {"HTTP",
     "The server's own: requests by endpoint and status (a series from its first answer), "
     "connections open."},
    {"Tracing", "Only when `server.tracing` is set in the serve file."},
    {"Models",
     "Only with `models:` in the serve file: one series per entry (`model`: its name). Each "
     "entry's pipeline is named after it, so the request series above carry "
     "`pipeline=\"<model name>\"`."},
});

inline constexpr std::array kExportedMetrics = std::to_array<MetricDefinition>({
    // Requests
    {"chatflow:time_to_first_token_seconds",
     MetricType::histogram,
     {"pipeline"},
     "From the HTTP request read to its first token leaving the pipeline.",
     MetricBuckets::token_latency,
     "Requests"},
    {"chatflow:inter_token_latency_seconds",
     MetricType::histogram,
     {"pipeline"},
     "Between consecutive token chunks of one stream.",
     MetricBuckets::token_latency,
     "Requests"},
    {"chatflow:request_time_per_output_token_seconds",
     MetricType::histogram,
     {"pipeline"},
     "Per request: (end-to-end time - time to first token) / (output tokens - 1).",
     MetricBuckets::token_latency,
     "Requests"},
    {"chatflow:e2e_request_latency_seconds",
     MetricType::histogram,
     {"pipeline"},
     "From the HTTP request read to its last chunk or error.",
     MetricBuckets::latency,
     "Requests"},
    {"chatflow:request_queue_time_seconds",
     MetricType::histogram,
     {"pipeline"},
     "Time a generation waited in the engine's queue.",
     MetricBuckets::latency,
     "Requests"},
    {"chatflow:request_prefill_time_seconds",
     MetricType::histogram,
     {"pipeline"},
     "From the engine scheduling a generation to its first token.",
     MetricBuckets::latency,
     "Requests"},
    {"chatflow:request_decode_time_seconds",
     MetricType::histogram,
     {"pipeline"},
     "From the first token to the end of generation.",
     MetricBuckets::latency,
     "Requests"},
    {"chatflow:stage_duration_seconds",
     MetricType::histogram,
     {"pipeline", "stage"},
     "Time each stage spent on one request (stream stages: summed over its chunks).",
     MetricBuckets::stage_latency,
     "Requests"},
    {"chatflow:prompt_tokens_total",
     MetricType::counter,
     {"pipeline"},
     "Prompt tokens of finished requests.",
     MetricBuckets::none,
     "Requests"},
    {"chatflow:generation_tokens_total",
     MetricType::counter,
     {"pipeline"},
     "Answer tokens of finished requests, cache hits included (each counted once).",
     MetricBuckets::none,
     "Requests"},
    {"chatflow:cache_served_tokens_total",
     MetricType::counter,
     {"pipeline", "cache"},
     "Answer tokens served from a cache without the engine (`cache`: exact or semantic); "
     "generation_tokens_total counts them too.",
     MetricBuckets::none,
     "Requests"},
    {"chatflow:request_success_total",
     MetricType::counter,
     {"pipeline", "finished_reason"},
     "Requests that finished, by finish reason.",
     MetricBuckets::none,
     "Requests"},
    {"chatflow:request_failure_total",
     MetricType::counter,
     {"pipeline"},
     "Requests that ended with an error or were cancelled.",
     MetricBuckets::none,
     "Requests"},
    {"chatflow:requests_in_flight",
     MetricType::gauge,
     {"pipeline"},
     "Requests admitted to the pipeline and not finished.",
     MetricBuckets::none,
     "Requests"},
    // Tenants and stages
    {"chatflow:tenant_requests_total",
     MetricType::counter,
     {"tenant", "status"},
     "Requests answered, by tenant and HTTP status.",
     MetricBuckets::none,
     "Tenants and stages"},
    {"chatflow:tenant_tokens_total",
     MetricType::counter,
     {"tenant", "kind"},
     "Tokens used, by tenant and kind.",
     MetricBuckets::none,
     "Tenants and stages"},
    {"chatflow:request_annotations_total",
     MetricType::counter,
     {"name", "value"},
     "Notes stages left on requests (e.g. moderation=flagged:injection_en).",
     MetricBuckets::none,
     "Tenants and stages"},
    {"chatflow:agent_steps_total",
     MetricType::counter,
     {"tool", "status"},
     "Tool calls of agent loops, by tool and outcome.",
     MetricBuckets::none,
     "Tenants and stages"},
    // A/B experiments
    {"chatflow:arm_requests_total",
     MetricType::counter,
     {"pipeline", "arm", "status"},
     "Requests answered, by A/B arm and HTTP status.",
     MetricBuckets::none,
     "A/B experiments"},
    {"chatflow:arm_tokens_total",
     MetricType::counter,
     {"pipeline", "arm", "kind"},
     "Tokens used, by A/B arm and kind.",
     MetricBuckets::none,
     "A/B experiments"},
    {"chatflow:arm_e2e_request_latency_seconds",
     MetricType::histogram,
     {"pipeline", "arm"},
     "From the HTTP request read to its last chunk or error, by A/B arm.",
     MetricBuckets::latency,
     "A/B experiments"},
    {"chatflow:arm_time_to_first_token_seconds",
     MetricType::histogram,
     {"pipeline", "arm"},
     "From the HTTP request read to its first token, by A/B arm.",
     MetricBuckets::token_latency,
     "A/B experiments"},
    // Engine
    {"chatflow:num_requests_running",
     MetricType::gauge,
     {"model_name"},
     "Sequences the engine is generating.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:num_requests_waiting",
     MetricType::gauge,
     {"model_name"},
     "Sequences queued for the engine.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:kv_cache_usage_perc",
     MetricType::gauge,
     {"model_name"},
     "Fraction of KV-cache blocks in use (cached blocks no sequence uses count as free).",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:kv_cache_blocks",
     MetricType::gauge,
     {"model_name"},
     "KV-cache blocks in the pool.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:kv_cache_sequence_blocks",
     MetricType::gauge,
     {"model_name"},
     "KV-cache block references held by live sequences (0 when nothing runs).",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:prefix_cache_queries_total",
     MetricType::counter,
     {"model_name"},
     "Prompt tokens looked up in the prefix cache.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:prefix_cache_hits_total",
     MetricType::counter,
     {"model_name"},
     "Prompt tokens found in the prefix cache.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:engine_prompt_tokens_computed_total",
     MetricType::counter,
     {"model_name"},
     "Prompt tokens the engine ran through the model (prefix-cache hits excluded).",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:engine_generated_tokens_total",
     MetricType::counter,
     {"model_name"},
     "Tokens the engine sampled.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:num_preemptions_total",
     MetricType::counter,
     {"model_name"},
     "Sequences preempted for lack of KV blocks.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:spec_decode_num_draft_tokens_total",
     MetricType::counter,
     {"model_name"},
     "Tokens speculative decoding guessed and the model checked (gguf_model speculative).",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:spec_decode_num_accepted_tokens_total",
     MetricType::counter,
     {"model_name"},
     "Guessed tokens the model chose too: each saves a decode step's weight reads.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:engine_steps_total",
     MetricType::counter,
     {"model_name"},
     "Batched forward passes.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:engine_backend_info",
     MetricType::gauge,
     {"model_name", "backend", "device"},
     "1, labelled with the backend the model computes on (cpu, cuda) and its device.",
     MetricBuckets::none,
     "Engine"},
    {"chatflow:engine_backend_memory_bytes",
     MetricType::gauge,
     {"model_name", "kind"},
     "Bytes the backend holds: kind weights (where it computes), kv_pool, workspace (activations "
     "and scratch at the largest step so far).",
     MetricBuckets::none,
     "Engine"},
    // Storage
    {"chatflow:storage_lost_writes_total",
     MetricType::counter,
     {"store"},
     "Rows or turns a store could not write (a full disk, a file gone read-only).",
     MetricBuckets::none,
     "Storage"},
    // HTTP
    {"chatflow:http_requests_total",
     MetricType::counter,
     {"endpoint", "status"},
     "HTTP requests answered, by endpoint and status.",
     MetricBuckets::none,
     "HTTP"},
    {"chatflow:http_open_connections",
     MetricType::gauge,
     {},
     "TCP connections open (idle keep-alive ones included).",
     MetricBuckets::none,
     "HTTP"},
    // Tracing
    {"chatflow:trace_spans_exported_total",
     MetricType::counter,
     {},
     "Spans the collector accepted.",
     MetricBuckets::none,
     "Tracing"},
    {"chatflow:trace_spans_dropped_total",
     MetricType::counter,
     {},
     "Spans never sent: the export queue was full, an export failed, or shutdown came first.",
     MetricBuckets::none,
     "Tracing"},
    {"chatflow:trace_exports_failed_total",
     MetricType::counter,
     {},
     "Exports the collector refused or that could not reach it.",
     MetricBuckets::none,
     "Tracing"},
    // Models
    {"chatflow:model_state",
     MetricType::gauge,
     {"model", "state"},
     "1 for the state the model is in (unloaded, loading, loaded, failed), 0 for the others.",
     MetricBuckets::none,
     "Models"},
    {"chatflow:model_loads_total",
     MetricType::counter,
     {"model", "outcome"},
     "Loads of the model's pipeline, by outcome (loaded, failed).",
     MetricBuckets::none,
     "Models"},
    {"chatflow:model_unloads_total",
     MetricType::counter,
     {"model"},
     "Times the model was unloaded (least recently used, to make room; or by a reload).",
     MetricBuckets::none,
     "Models"},
    {"chatflow:model_load_duration_seconds",
     MetricType::histogram,
     {"model"},
     "How long a successful load of the model's pipeline took.",
     MetricBuckets::latency,
     "Models"},
    {"chatflow:model_waiting_requests",
     MetricType::gauge,
     {"model"},
     "Requests waiting for the model to load.",
     MetricBuckets::none,
     "Models"},
});

// The table's entry for `name`; a name that is not in the table does not compile.
consteval const MetricDefinition& exported_metric(std::string_view name) {
  for (const auto& metric : kExportedMetrics) {
    if (metric.name == name) return metric;
  }
  throw "not an exported metric: add it to kExportedMetrics";
}

namespace exported_metrics_detail {

consteval bool names_are_unique_and_prefixed() {
  for (size_t i = 0; i < kExportedMetrics.size(); ++i) {
    if (!kExportedMetrics[i].name.starts_with("chatflow:")) return false;
    for (size_t j = i + 1; j < kExportedMetrics.size(); ++j) {
      if (kExportedMetrics[i].name == kExportedMetrics[j].name) return false;
    }
  }
  return true;
}

// Prometheus' conventions: counters end in _total, histograms name their unit; a histogram
// has buckets; every metric sits under a group the reference lists.
consteval bool metrics_follow_the_conventions() {
  for (const auto& metric : kExportedMetrics) {
    if ((metric.type == MetricType::counter) != metric.name.ends_with("_total")) return false;
    if ((metric.type == MetricType::histogram) != (metric.buckets != MetricBuckets::none))
      return false;
    if (metric.type == MetricType::histogram && !metric.name.ends_with("_seconds")) return false;
    bool grouped = false;
    for (const auto& group : kMetricGroups)
      grouped = grouped || group.name == metric.group;
    if (!grouped) return false;
  }
  return true;
}

static_assert(names_are_unique_and_prefixed(), "two metrics share a name, or one lacks chatflow:");
static_assert(metrics_follow_the_conventions(),
              "a metric breaks a convention (counter _total, histogram buckets and unit, group)");

}  // namespace exported_metrics_detail

}  // namespace chatflow::server
