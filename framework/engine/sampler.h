// Turning logits into the next token: penalties over the tokens generated so far, then top-k,
// top-p and min-p filtering, temperature, and a seeded draw (greedy at temperature 0). The
// random stream is specified exactly (mt19937_64 and our own uniform mapping), so a seed gives
// the same tokens on every platform.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // >1 discourages tokens already seen (llama.cpp style)
  float presence_penalty = 0.0f;    // OpenAI: subtracted once from a seen token's logit
  float frequency_penalty = 0.0f;   // OpenAI: subtracted per occurrence
  int penalty_window = 0;           // recent tokens the penalties look at; 0: all generated
  std::optional<uint64_t> seed;     // none: random
  int top_logprobs = 0;             // alternatives reported per token (0..20)
  bool logprobs = false;            // report the chosen token's log-probability
};

struct TokenLogprob {
  TokenId token = kNoToken;
  float logprob = 0;
};

struct SampledToken {
  TokenId token = kNoToken;
  float logprob = 0;              // under the model's distribution (raw logits, softmax)
  std::vector<TokenLogprob> top;  // the most likely alternatives, best first
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // `logits` is consumed (modified). `history` is what the penalties look at.
  SampledToken sample(std::span<float> logits, std::span<const TokenId> history);

  const SamplingParams& params() const { return params_; }

 private:
  float uniform();  // [0, 1)
  // candidates_ = (logit, id) of every token, most likely first, cut to top_k when set.
  void sort_candidates(std::span<const float> logits);
  // The seeded draw at the temperature, among what top-k, min-p and top-p keep.
  TokenId draw_token(std::span<const float> logits);

  SamplingParams params_;
  std::mt19937_64 random_;
  std::vector<std::pair<float, TokenId>> candidates_;
};

}  // namespace chatflow::engine
