#include "framework/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace chatflow::engine {

Sampler::Sampler(SamplingParams params) : params_(std::move(params)) {
  random_.seed(params_.seed ? *params_.seed : std::random_device{}());
}

float Sampler::uniform() {
  // The top 24 bits give every float in [0, 1) with equal spacing, on every platform.
  return static_cast<float>(random_() >> 40) * (1.0f / 16777216.0f);
}

namespace {

// The two numbers log-softmax needs: log p(i) = logits[i] - max_logit - log_sum.
void log_softmax_of(std::span<const float> logits, float& max_logit, double& log_sum) {
  max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float logit : logits)
    sum += std::exp(static_cast<double>(logit - max_logit));
  log_sum = std::log(sum);
}

// Most likely first; the lower id first on ties, so the order never depends on the sort.
bool more_likely(const std::pair<float, TokenId>& a, const std::pair<float, TokenId>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The `count` most likely tokens with their log-probabilities, best first.
std::vector<TokenLogprob> top_logprobs_of(std::span<const float> logits, int count, float max_logit,
                                          double log_sum) {
  const int64_t vocabulary = static_cast<int64_t>(logits.size());
  std::vector<std::pair<float, TokenId>> best;
  best.reserve(static_cast<size_t>(vocabulary));
  for (int64_t i = 0; i < vocabulary; ++i) {
    // A token a constraint ruled out is no alternative.
    if (logits[i] != -std::numeric_limits<float>::infinity())
      best.emplace_back(logits[i], static_cast<TokenId>(i));
  }
  size_t keep = std::min<size_t>(static_cast<size_t>(count), best.size());
  std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(keep), best.end(),
                    more_likely);
  std::vector<TokenLogprob> top;
  for (size_t i = 0; i < keep; ++i) {
    top.push_back({best[i].second, static_cast<float>(best[i].first - max_logit - log_sum)});
  }
  return top;
}

// Repetition (llama.cpp style), frequency and presence (OpenAI style) penalties over the last
// `penalty_window` tokens of the history (all of it when 0).
void apply_penalties(const SamplingParams& params, std::span<float> logits,
                     std::span<const TokenId> history) {
  const int64_t vocabulary = static_cast<int64_t>(logits.size());
  size_t window = params.penalty_window > 0
                      ? std::min<size_t>(static_cast<size_t>(params.penalty_window), history.size())
                      : history.size();
  std::unordered_map<TokenId, int> counts;
  for (size_t i = history.size() - window; i < history.size(); ++i)
    ++counts[history[i]];
  for (const auto& [token, count] : counts) {
    if (token < 0 || token >= vocabulary) continue;
    float& logit = logits[token];
    if (params.repetition_penalty != 1.0f) {
      logit = logit > 0 ? logit / params.repetition_penalty : logit * params.repetition_penalty;
    }
    logit -= static_cast<float>(count) * params.frequency_penalty + params.presence_penalty;
  }
}

// Greedy: the highest logit, the lowest id on ties.
TokenId greedy_token(std::span<const float> logits) {
  const int64_t vocabulary = static_cast<int64_t>(logits.size());
  TokenId best = 0;
  for (int64_t i = 1; i < vocabulary; ++i) {
    if (logits[i] > logits[best]) best = static_cast<TokenId>(i);
  }
  return best;
}

// Probabilities of the sorted candidates at `temperature`, most likely first.
std::vector<double> probabilities_at(const std::vector<std::pair<float, TokenId>>& candidates,
                                     float temperature) {
  std::vector<double> probabilities(candidates.size());
  double total = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    probabilities[i] =
        std::exp(static_cast<double>(candidates[i].first - candidates[0].first) / temperature);
    total += probabilities[i];
  }
  for (double& probability : probabilities)
    probability /= total;
  return probabilities;
}

// How many of the most likely candidates min-p and then top-p keep (at least one).
size_t kept_by_min_p_and_top_p(const SamplingParams& params,
                               const std::vector<double>& probabilities) {
  size_t cut = probabilities.size();
  if (params.min_p > 0.0f) {
    double floor = params.min_p * probabilities[0];
    cut = 1;
    while (cut < probabilities.size() && probabilities[cut] >= floor)
      ++cut;
  }
  if (params.top_p < 1.0f) {
    double cumulative = 0;
    size_t needed = 0;
    while (needed < cut) {
      cumulative += probabilities[needed++];
      if (cumulative >= params.top_p) break;
    }
    cut = std::max<size_t>(1, needed);
  }
  return cut;
}

// (logit, id) of every token, most likely first, cut to top_k when set.
void sort_candidates(const SamplingParams& params, std::span<const float> logits,
                     std::vector<std::pair<float, TokenId>>& candidates) {
  const int64_t vocabulary = static_cast<int64_t>(logits.size());
  candidates.clear();
  for (int64_t i = 0; i < vocabulary; ++i)
    candidates.emplace_back(logits[i], static_cast<TokenId>(i));
  size_t keep = candidates.size();
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < keep) {
    keep = static_cast<size_t>(params.top_k);
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep),
                      candidates.end(), more_likely);
    candidates.resize(keep);
  } else {
    std::sort(candidates.begin(), candidates.end(), more_likely);
  }
}

// The draw at the temperature, among what top-k, min-p and top-p keep.
TokenId draw_token(const SamplingParams& params, std::span<const float> logits, float uniform,
                   std::vector<std::pair<float, TokenId>>& candidates) {
  sort_candidates(params, logits, candidates);
  std::vector<double> probabilities = probabilities_at(candidates, params.temperature);
  size_t cut = kept_by_min_p_and_top_p(params, probabilities);
  // One draw over the kept probabilities, not renormalised: the draw is scaled to their sum.
  double kept = 0;
  for (size_t i = 0; i < cut; ++i)
    kept += probabilities[i];
  double draw = static_cast<double>(uniform) * kept;
  size_t chosen = 0;
  double cumulative = probabilities[0];
  while (chosen + 1 < cut && draw >= cumulative)
    cumulative += probabilities[++chosen];
  return candidates[chosen].second;
}

}  // namespace

namespace {

// The token to draw, given the logits after penalties; the rest of sample_token around it.
template <class Choose>
SampledToken sample_with(const SamplingParams& params, std::span<float> logits,
                         std::span<const TokenId> history, Choose choose) {
  SampledToken result;

  // Log-probabilities are reported from the model's own distribution, before any shaping.
  float max_logit = 0;
  double log_sum = 0;
  bool want_logprobs = params.logprobs || params.top_logprobs > 0;
  std::vector<TokenLogprob> top;
  if (want_logprobs) {
    log_softmax_of(logits, max_logit, log_sum);
    if (params.top_logprobs > 0)
      top = top_logprobs_of(logits, params.top_logprobs, max_logit, log_sum);
  }
  // The chosen token's raw logit, before penalties change it.
  std::vector<float> raw;
  if (want_logprobs) raw.assign(logits.begin(), logits.end());

  if (params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
      params.frequency_penalty != 0.0f) {
    apply_penalties(params, logits, history);
  }

  result.token = choose(logits);
  if (want_logprobs) {
    result.logprob =
        static_cast<float>(raw[static_cast<size_t>(result.token)] - max_logit - log_sum);
    result.top = std::move(top);
  }
  return result;
}

// The guess kept with the probability the parameters give it, else a draw without it.
TokenId check_guess(const SamplingParams& params, std::span<const float> logits, TokenId guess,
                    float accept_uniform, float draw_uniform,
                    std::vector<std::pair<float, TokenId>>& candidates, bool& accepted) {
  sort_candidates(params, logits, candidates);
  std::vector<double> probabilities = probabilities_at(candidates, params.temperature);
  const size_t cut = kept_by_min_p_and_top_p(params, probabilities);
  double kept = 0;
  double guessed = 0;  // the guess's share of `kept` (0 when cut off)
  for (size_t i = 0; i < cut; ++i) {
    kept += probabilities[i];
    if (candidates[i].second == guess) guessed = probabilities[i];
  }
  accepted = static_cast<double>(accept_uniform) * kept < guessed;
  if (accepted) return guess;
  // What is left when the guess is taken out, drawn as draw_token draws (scaled, in order).
  double draw = static_cast<double>(draw_uniform) * (kept - guessed);
  double cumulative = 0;
  TokenId last = candidates[0].second;
  for (size_t i = 0; i < cut; ++i) {
    if (candidates[i].second == guess) continue;
    last = candidates[i].second;
    cumulative += probabilities[i];
    if (draw < cumulative) return last;
  }
  return last;  // rounding at the very end of the range
}

}  // namespace

SampledToken sample_token(const SamplingParams& params, std::span<float> logits,
                          std::span<const TokenId> history, float uniform,
                          SamplingScratch& scratch) {
  return sample_with(params, logits, history, [&](std::span<const float> shaped) {
    return params.temperature <= 0.0f ? greedy_token(shaped)
                                      : draw_token(params, shaped, uniform, scratch.candidates);
  });
}

VerifiedToken verify_guess(const SamplingParams& params, std::span<float> logits,
                           std::span<const TokenId> history, TokenId guess, float accept_uniform,
                           float draw_uniform, SamplingScratch& scratch) {
  VerifiedToken verified;
  verified.token = sample_with(params, logits, history, [&](std::span<const float> shaped) {
    if (params.temperature <= 0.0f) {
      const TokenId best = greedy_token(shaped);
      verified.accepted = best == guess;
      return best;
    }
    return check_guess(params, shaped, guess, accept_uniform, draw_uniform, scratch.candidates,
                       verified.accepted);
  });
  return verified;
}

void apply_allowed_tokens(std::span<const uint64_t> allowed, std::span<float> logits) {
  if (allowed.empty()) return;
  constexpr float kForbidden = -std::numeric_limits<float>::infinity();
  for (size_t id = 0; id < logits.size(); ++id) {
    const size_t word = id / 64;
    if (word >= allowed.size() || (allowed[word] >> (id % 64) & 1) == 0) logits[id] = kForbidden;
  }
}

float Sampler::next_uniform() {
  return params_.temperature <= 0.0f ? 0.0f : uniform();
}

SampledToken Sampler::sample(std::span<float> logits, std::span<const TokenId> history) {
  return sample_token(params_, logits, history, next_uniform(), scratch_);
}

VerifiedToken Sampler::verify(std::span<float> logits, std::span<const TokenId> history,
                              TokenId guess) {
  const float accept = next_uniform();
  const float draw = next_uniform();
  return verify_guess(params_, logits, history, guess, accept, draw, scratch_);
}

}  // namespace chatflow::engine
