// The translations at the line between the pipeline and the engine, which knows no requests:
// each in one place, so a new sampling knob or engine counter is added once.
#pragma once

#include "framework/api/chunk.h"
#include "framework/api/request.h"
#include "framework/api/served_model.h"
#include "framework/engine/scheduler.h"

namespace chatflow {

engine::SamplingParams to_sampling_params(const GenerationParams& params);
// The request's prompt tokens and generation parameters as the scheduler takes them; its cache
// salt is the tenant, so no tenant reuses another's KV blocks.
engine::SequenceSpec to_sequence_spec(const Request& request);

// `block_tokens`: positions per KV block, to report prefix-cache blocks as tokens.
EngineStats to_engine_stats(const engine::SchedulerStats& stats, int64_t block_tokens);
Usage to_usage(const engine::SequenceUsage& usage);
// The chosen token's log-probability with its alternatives (their text comes at detokenize).
TokenLogprob to_token_logprob(const engine::SampledToken& token);

}  // namespace chatflow
