#include "framework/engine/sampler.h"

#include <algorithm>
#include <cmath>
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

}  // namespace

SampledToken Sampler::sample(std::span<float> logits, std::span<const TokenId> history) {
  const int64_t vocabulary = static_cast<int64_t>(logits.size());
  SampledToken result;

  // Log-probabilities are reported from the model's own distribution, before any shaping.
  float max_logit = 0;
  double log_sum = 0;
  bool want_logprobs = params_.logprobs || params_.top_logprobs > 0;
  std::vector<TokenLogprob> top;
  if (want_logprobs) {
    log_softmax_of(logits, max_logit, log_sum);
    if (params_.top_logprobs > 0) {
      std::vector<std::pair<float, TokenId>> best;
      best.reserve(static_cast<size_t>(vocabulary));
      for (int64_t i = 0; i < vocabulary; ++i)
        best.emplace_back(logits[i], static_cast<TokenId>(i));
      size_t keep = std::min<size_t>(static_cast<size_t>(params_.top_logprobs), best.size());
      std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(keep), best.end(),
                        [](const auto& a, const auto& b) {
                          return a.first > b.first || (a.first == b.first && a.second < b.second);
                        });
      for (size_t i = 0; i < keep; ++i) {
        top.push_back({best[i].second, static_cast<float>(best[i].first - max_logit - log_sum)});
      }
    }
  }
  // The chosen token's raw logit, before penalties change it.
  std::vector<float> raw;
  if (want_logprobs) raw.assign(logits.begin(), logits.end());

  // Penalties over the recent history.
  if (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
      params_.frequency_penalty != 0.0f) {
    size_t window =
        params_.penalty_window > 0
            ? std::min<size_t>(static_cast<size_t>(params_.penalty_window), history.size())
            : history.size();
    std::unordered_map<TokenId, int> counts;
    for (size_t i = history.size() - window; i < history.size(); ++i)
      ++counts[history[i]];
    for (const auto& [token, count] : counts) {
      if (token < 0 || token >= vocabulary) continue;
      float& logit = logits[token];
      if (params_.repetition_penalty != 1.0f) {
        logit = logit > 0 ? logit / params_.repetition_penalty : logit * params_.repetition_penalty;
      }
      logit -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    }
  }

  if (params_.temperature <= 0.0f) {
    // Greedy: the highest logit, the lowest id on ties.
    TokenId best = 0;
    for (int64_t i = 1; i < vocabulary; ++i) {
      if (logits[i] > logits[best]) best = static_cast<TokenId>(i);
    }
    result.token = best;
  } else {
    candidates_.clear();
    for (int64_t i = 0; i < vocabulary; ++i)
      candidates_.emplace_back(logits[i], static_cast<TokenId>(i));
    auto by_logit = [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t keep = candidates_.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
      keep = static_cast<size_t>(params_.top_k);
      std::partial_sort(candidates_.begin(),
                        candidates_.begin() + static_cast<std::ptrdiff_t>(keep), candidates_.end(),
                        by_logit);
      candidates_.resize(keep);
    } else {
      std::sort(candidates_.begin(), candidates_.end(), by_logit);
    }
    // Probabilities at the requested temperature, most likely first.
    std::vector<double> probabilities(candidates_.size());
    double total = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      probabilities[i] = std::exp(static_cast<double>(candidates_[i].first - candidates_[0].first) /
                                  params_.temperature);
      total += probabilities[i];
    }
    for (double& probability : probabilities)
      probability /= total;
    size_t cut = probabilities.size();
    if (params_.min_p > 0.0f) {
      double floor = params_.min_p * probabilities[0];
      cut = 1;
      while (cut < probabilities.size() && probabilities[cut] >= floor)
        ++cut;
    }
    if (params_.top_p < 1.0f) {
      double cumulative = 0;
      size_t needed = 0;
      while (needed < cut) {
        cumulative += probabilities[needed++];
        if (cumulative >= params_.top_p) break;
      }
      cut = std::max<size_t>(1, needed);
    }
    double kept = 0;
    for (size_t i = 0; i < cut; ++i)
      kept += probabilities[i];
    double draw = static_cast<double>(uniform()) * kept;
    size_t chosen = 0;
    double cumulative = probabilities[0];
    while (chosen + 1 < cut && draw >= cumulative)
      cumulative += probabilities[++chosen];
    result.token = candidates_[chosen].second;
  }
  if (want_logprobs) {
    result.logprob =
        static_cast<float>(raw[static_cast<size_t>(result.token)] - max_logit - log_sum);
    result.top = std::move(top);
  }
  return result;
}

}  // namespace chatflow::engine
