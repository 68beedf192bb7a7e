#include "framework/bridge/engine_bridge.h"

namespace chatflow {

engine::SamplingParams to_sampling_params(const GenerationParams& params) {
  engine::SamplingParams sampling;
  sampling.temperature = params.temperature;
  sampling.top_p = params.top_p;
  sampling.top_k = params.top_k;
  sampling.min_p = params.min_p;
  sampling.presence_penalty = params.presence_penalty;
  sampling.frequency_penalty = params.frequency_penalty;
  sampling.repetition_penalty = params.repetition_penalty;
  sampling.seed = params.seed;
  sampling.logprobs = params.logprobs;
  sampling.top_logprobs = params.top_logprobs;
  return sampling;
}

engine::SequenceSpec to_sequence_spec(const Request& request) {
  engine::SequenceSpec spec;
  spec.prompt.assign(request.prompt_tokens.begin(), request.prompt_tokens.end());
  spec.sampling = to_sampling_params(request.generation);
  spec.max_tokens = request.generation.max_tokens;
  spec.ignore_eos = request.generation.ignore_eos;
  spec.cache_salt = request.identity.tenant;
  return spec;
}

EngineStats to_engine_stats(const engine::SchedulerStats& stats, int64_t block_tokens) {
  EngineStats out;
  out.running = stats.running;
  out.waiting = stats.waiting;
  out.kv_blocks_total = stats.total_blocks;
  // Cached blocks no sequence uses are reclaimed on demand: they count as free, as in vLLM.
  out.kv_blocks_used = stats.total_blocks - stats.free_blocks - stats.evictable_blocks;
  out.kv_blocks_sequence = stats.sequence_blocks;
  out.prefix_queried_tokens = stats.prefix_queried_blocks * block_tokens;
  out.prefix_hit_tokens = stats.prefix_hit_blocks * block_tokens;
  out.prompt_tokens_computed = stats.prompt_tokens_computed;
  out.generated_tokens = stats.generated_tokens;
  out.preemptions = stats.preemptions;
  out.steps = stats.steps;
  out.draft_tokens = stats.drafted_tokens;
  out.accepted_tokens = stats.accepted_tokens;
  return out;
}

Usage to_usage(const engine::SequenceUsage& usage) {
  return Usage{usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens};
}

TokenLogprob to_token_logprob(const engine::SampledToken& token) {
  TokenLogprob logprob{token.token, {}, token.logprob, {}};
  for (const auto& alternative : token.top)
    logprob.top.push_back({alternative.token, {}, alternative.logprob, {}});
  return logprob;
}

}  // namespace chatflow
