// The parts of a forward step every backend computes the same way on the host: checking a step's
// chunks, which tokens give logits rows, rotary angles (as llama.cpp computes them, so that files
// agree with it) and mixture-of-experts routing (as llama.cpp ranks experts). One definition, so
// the CPU and CUDA backends cannot drift apart in them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "framework/engine/backend.h"
#include "framework/engine/model_config.h"

namespace chatflow::engine {

// Vocabulary-sized rows a step writes for `chunks`: one per chunk that wants logits or a token,
// one per token of a chunk that wants every_logits.
int64_t step_logit_rows(std::span<const StepChunk> chunks);

// Checks every chunk before anything is computed: a token id outside the vocabulary throws
// std::out_of_range, a chunk past the context std::length_error, a block table that does not
// cover its chunk (blocks of `block_tokens` positions) std::logic_error.
void check_step_chunks(const ModelConfig& config, int64_t block_tokens,
                       std::span<const StepChunk> chunks);

// A step's tokens laid out one after another: each one's position and sequence (chunk index),
// and the tokens whose final hidden state becomes a logits row, in the order of
// Backend::forward's output (rows for logits and every_logits first, in chunk order, then the
// rows of chunks that want a token).
struct StepLayout {
  std::vector<int64_t> positions;
  std::vector<int64_t> chunk_of_token;
  std::vector<int64_t> logit_tokens;
  int64_t token_rows = 0;  // of logit_tokens, those (at the end) of chunks that want a token
};
void lay_out_step(std::span<const StepChunk> chunks, StepLayout& layout);

// Cosines and sines ([positions][rope_dimensions / 2], scaled by the magnitude) of the rotation
// `rope` gives each position.
void rope_angles(const ModelConfig& config, const RopeParameters& rope,
                 std::span<const int64_t> positions, float* cosines, float* sines);

// Each token's experts from its router row (overwritten by their softmax): the `experts_used`
// most probable, in rank order, into chosen[t * used + k], with their probabilities
// (renormalised when the family does) into weights.
void route_to_experts(const ModelConfig& config, float* router_rows, int64_t tokens,
                      std::vector<int64_t>& chosen, std::vector<float>& weights);

// Draws the token of every chunk that wants one from its logits row (`rows`: one row of
// `vocabulary` logits per such chunk, in chunk order), the constraint's mask applied first, with
// sample_token (sampler.h), appending to `tokens`. The rows are overwritten.
void draw_chunk_tokens(std::span<const StepChunk> chunks, float* rows, int64_t vocabulary,
                       SamplingScratch& scratch, std::vector<SampledToken>& tokens);

}  // namespace chatflow::engine
