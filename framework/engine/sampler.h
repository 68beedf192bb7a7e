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

// What drawing a token reuses from one draw to the next (its buffers).
struct SamplingScratch {
  std::vector<std::pair<float, TokenId>> candidates;  // (logit, id), most likely first
};

// One token drawn from `logits` as `params` say, with `uniform` (in [0, 1)) as the draw's random
// number (unused when greedy): the sampling itself, with no random stream of its own, so that a
// backend can run it where the logits are (backend.h). `logits` is consumed (modified).
// `history` is what the penalties look at.
SampledToken sample_token(const SamplingParams& params, std::span<float> logits,
                          std::span<const TokenId> history, float uniform,
                          SamplingScratch& scratch);

// Speculative decoding's check of a guessed token (a guess made with certainty, as prompt lookup
// makes them): greedy keeps the guess when it is the best token; sampling keeps it with the
// probability p(guess) the parameters give it, else draws from p without it, so the token has
// exactly sample_token's distribution (the rule of Leviathan et al. and Chen et al., 2023, for a
// one-hot draft). `accept_uniform` and `draw_uniform` are in [0, 1); greedy uses neither.
struct VerifiedToken {
  SampledToken token;
  bool accepted = false;  // token.token is the guess
};
VerifiedToken verify_guess(const SamplingParams& params, std::span<float> logits,
                           std::span<const TokenId> history, TokenId guess, float accept_uniform,
                           float draw_uniform, SamplingScratch& scratch);

// A constraint's allowed-token mask on a logits row: every token whose bit (id % 64 of word
// id / 64) is clear gets -infinity; an empty mask allows every token.
void apply_allowed_tokens(std::span<const uint64_t> allowed, std::span<float> logits);

// One sequence's sampling: its parameters and its random stream.
class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // `logits` is consumed (modified). `history` is what the penalties look at.
  SampledToken sample(std::span<float> logits, std::span<const TokenId> history);

  // verify_guess() with the next two numbers of the stream (none when greedy).
  VerifiedToken verify(std::span<float> logits, std::span<const TokenId> history, TokenId guess);

  // The random number of the next draw, in [0, 1): taken from the stream when the parameters
  // draw at random (a draw takes exactly one), else 0 and the stream stays where it is.
  // sample() is sample_token() with this number.
  float next_uniform();

  const SamplingParams& params() const { return params_; }

 private:
  float uniform();  // [0, 1)

  SamplingParams params_;
  std::mt19937_64 random_;
  SamplingScratch scratch_;
};

}  // namespace chatflow::engine
