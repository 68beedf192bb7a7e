// The metrics the server keeps, with vLLM's names under a chatflow: prefix: per-pipeline request
// latencies and token counts, per-stage durations, HTTP statuses, and the engine's gauges read at
// scrape time.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "framework/api/served_model.h"
#include "framework/runtime/pipeline.h"
#include "framework/server/metrics.h"

namespace chatflow::server {

// When a request's tokens reached the client side of the pipeline (steady-clock ns).
struct TokenTimes {
  int64_t received_ns = 0;  // the HTTP request was read
  int64_t first_token_ns = 0;
  int64_t last_token_ns = 0;
};

class RequestMetrics {
 public:
  RequestMetrics(MetricsRegistry& registry, const PipelineSpec& spec);

  // Between two chunks that carried tokens.
  void observe_inter_token(double seconds) { inter_token_->observe(seconds); }
  // Once per finished request (any outcome), when nothing writes to it any more; `status` is
  // the HTTP status the client got.
  void observe_finished(const Request& request, const TokenTimes& times, int status);

 private:
  Histogram* time_to_first_token_;
  Histogram* inter_token_;
  Histogram* time_per_output_token_;
  Histogram* end_to_end_;
  Histogram* queue_time_;
  Histogram* prefill_time_;
  Histogram* decode_time_;
  std::vector<Histogram*> stage_duration_;  // per stage, in pipeline order
  Counter* prompt_tokens_;
  Counter* generation_tokens_;
  std::array<Counter*, 3> success_;  // by FinishReason
  Counter* failed_;
  // Per-tenant, per-annotation and per-arm series are made on first use.
  MetricsRegistry& registry_;
  std::string pipeline_;
};

// Engine gauges and counters of every served model, labelled model_name, sampled per scrape;
// plus the pipeline's requests in flight.
void register_engine_metrics(MetricsRegistry& registry,
                             std::vector<std::shared_ptr<const ServedModel>> models,
                             std::shared_ptr<const Pipeline> pipeline);

}  // namespace chatflow::server
