#include "framework/engine/step_math.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace chatflow::engine {

int64_t step_logit_rows(std::span<const StepChunk> chunks) {
  int64_t rows = 0;
  for (const auto& chunk : chunks) {
    if (chunk.tokens.empty() || chunk.want == StepChunk::Want::nothing) continue;
    rows +=
        chunk.want == StepChunk::Want::every_logits ? static_cast<int64_t>(chunk.tokens.size()) : 1;
  }
  return rows;
}

void check_step_chunks(const ModelConfig& config, int64_t block_tokens,
                       std::span<const StepChunk> chunks) {
  for (const auto& chunk : chunks) {
    int64_t end = chunk.start + static_cast<int64_t>(chunk.tokens.size());
    if (end > config.context) {
      throw std::length_error("sequence of " + std::to_string(end) +
                              " tokens exceeds the model's context of " +
                              std::to_string(config.context));
    }
    if (chunk.start < 0 || static_cast<int64_t>(chunk.block_table.size()) * block_tokens < end)
      throw std::logic_error("KV positions were not reserved before the forward pass");
    for (TokenId id : chunk.tokens) {
      if (id < 0 || id >= config.vocabulary) {
        throw std::out_of_range("token id " + std::to_string(id) +
                                " is outside the vocabulary of " +
                                std::to_string(config.vocabulary));
      }
    }
  }
}

void lay_out_step(std::span<const StepChunk> chunks, StepLayout& layout) {
  layout.positions.clear();
  layout.chunk_of_token.clear();
  layout.logit_tokens.clear();
  std::vector<int64_t> token_rows;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const StepChunk& chunk = chunks[c];
    for (size_t i = 0; i < chunk.tokens.size(); ++i) {
      const auto t = static_cast<int64_t>(layout.positions.size());
      layout.positions.push_back(chunk.start + static_cast<int64_t>(i));
      layout.chunk_of_token.push_back(static_cast<int64_t>(c));
      if (chunk.want == StepChunk::Want::every_logits) layout.logit_tokens.push_back(t);
    }
    if (chunk.tokens.empty()) continue;
    const int64_t last = static_cast<int64_t>(layout.positions.size()) - 1;
    if (chunk.want == StepChunk::Want::logits) layout.logit_tokens.push_back(last);
    if (chunk.want == StepChunk::Want::token) token_rows.push_back(last);
  }
  layout.token_rows = static_cast<int64_t>(token_rows.size());
  layout.logit_tokens.insert(layout.logit_tokens.end(), token_rows.begin(), token_rows.end());
}

// Repeated multiplication in float, then the frequency factor, the scaling and YaRN's blend per
// pair: llama.cpp's rope, step for step.
void rope_angles(const ModelConfig& config, const RopeParameters& rope,
                 std::span<const int64_t> positions, float* cosines, float* sines) {
  const int64_t pairs = config.rope_dimensions / 2;
  const float theta_scale = std::pow(rope.base, -2.0f / static_cast<float>(config.rope_dimensions));
  const float* factors = rope.frequency_factors.empty() ? nullptr : rope.frequency_factors.data();
  float magnitude = rope.magnitude;
  if (rope.yarn) magnitude *= 1.0f + 0.1f * std::log(1.0f / rope.position_scale);
  for (size_t t = 0; t < positions.size(); ++t) {
    float theta = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < pairs; ++i) {
      const float unscaled = factors ? theta / factors[i] : theta;
      float angle = rope.position_scale * unscaled;
      if (rope.yarn) {
        float ramp = (static_cast<float>(i) - rope.yarn_low) /
                     std::max(0.001f, rope.yarn_high - rope.yarn_low);
        float mix = 1 - std::min(1.0f, std::max(0.0f, ramp));
        angle = angle * (1 - mix) + unscaled * mix;
      }
      cosines[static_cast<int64_t>(t) * pairs + i] = std::cos(angle) * magnitude;
      sines[static_cast<int64_t>(t) * pairs + i] = std::sin(angle) * magnitude;
      theta *= theta_scale;
    }
  }
}

void route_to_experts(const ModelConfig& config, float* router_rows, int64_t tokens,
                      std::vector<int64_t>& chosen, std::vector<float>& weights) {
  const int64_t experts = config.experts, used = config.experts_used;
  chosen.resize(static_cast<size_t>(tokens * used));
  weights.resize(static_cast<size_t>(tokens * used));
  std::vector<int64_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    float* probabilities = router_rows + t * experts;
    float largest = *std::max_element(probabilities, probabilities + experts);
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e)
      sum += probabilities[e] = std::exp(probabilities[e] - largest);
    for (int64_t e = 0; e < experts; ++e)
      probabilities[e] = static_cast<float>(probabilities[e] / sum);
    for (int64_t e = 0; e < experts; ++e)
      order[static_cast<size_t>(e)] = e;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return probabilities[a] > probabilities[b]; });
    float total = 0;
    for (int64_t k = 0; k < used; ++k) {
      chosen[static_cast<size_t>(t * used + k)] = order[static_cast<size_t>(k)];
      total += weights[static_cast<size_t>(t * used + k)] =
          probabilities[order[static_cast<size_t>(k)]];
    }
    if (config.renormalise_expert_weights) {
      for (int64_t k = 0; k < used; ++k)
        weights[static_cast<size_t>(t * used + k)] /= total;
    }
  }
}

void draw_chunk_tokens(std::span<const StepChunk> chunks, float* rows, int64_t vocabulary,
                       SamplingScratch& scratch, std::vector<SampledToken>& tokens) {
  const auto width = static_cast<size_t>(vocabulary);
  for (const auto& chunk : chunks) {
    if (chunk.want != StepChunk::Want::token || chunk.tokens.empty()) continue;
    std::span<float> logits(rows, width);
    apply_allowed_tokens(chunk.draw.allowed, logits);
    tokens.push_back(
        sample_token(*chunk.draw.params, logits, chunk.draw.history, chunk.draw.uniform, scratch));
    rows += width;
  }
}

}  // namespace chatflow::engine
