// Sampling: greedy, seeded reproducibility, the filters, penalties and log-probabilities.
#include "framework/engine/sampler.h"

#include <cmath>
#include <map>

#include <gtest/gtest.h>

namespace chatflow::engine {
namespace {

TokenId sample_once(SamplingParams params, std::vector<float> logits,
                    std::vector<TokenId> history = {}) {
  Sampler sampler(std::move(params));
  return sampler.sample(logits, history).token;
}

TEST(Sampler, GreedyTakesTheLargestLogitAndTheLowestIdOnTies) {
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_once(greedy, {0.1f, 2.0f, -1.0f, 1.5f}), 1);
  EXPECT_EQ(sample_once(greedy, {3.0f, 1.0f, 3.0f}), 0);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(50, 0.0f);  // uniform: every draw is up to the random stream
  auto draw = [&](uint64_t seed) {
    SamplingParams params;
    params.seed = seed;
    Sampler sampler(params);
    std::vector<TokenId> tokens;
    for (int i = 0; i < 20; ++i) {
      std::vector<float> copy = logits;
      tokens.push_back(sampler.sample(copy, {}).token);
    }
    return tokens;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, TemperatureOneFollowsTheModelsDistribution) {
  // logits ln 3 and 0: probabilities 3/4 and 1/4.
  SamplingParams params;
  params.seed = 7;
  Sampler sampler(params);
  int first = 0;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> logits = {std::log(3.0f), 0.0f};
    first += sampler.sample(logits, {}).token == 0;
  }
  EXPECT_NEAR(static_cast<double>(first) / draws, 0.75, 0.015);
}

TEST(Sampler, TopKOneTopPSmallAndMinPHighAllPickTheBest) {
  std::vector<float> logits = {1.0f, 3.0f, 2.9f, 0.5f};
  for (int seed = 0; seed < 20; ++seed) {
    SamplingParams top_k;
    top_k.top_k = 1;
    top_k.seed = seed;
    EXPECT_EQ(sample_once(top_k, logits), 1);
    SamplingParams top_p;
    top_p.top_p = 0.01f;
    top_p.seed = seed;
    EXPECT_EQ(sample_once(top_p, logits), 1);
    SamplingParams min_p;
    min_p.min_p = 0.99f;
    min_p.seed = seed;
    EXPECT_EQ(sample_once(min_p, logits), 1);
  }
}

TEST(Sampler, TopKTwoNeverPicksTheThird) {
  SamplingParams params;
  params.top_k = 2;
  params.seed = 3;
  Sampler sampler(params);
  std::map<TokenId, int> seen;
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> logits = {1.0f, 1.1f, 0.9f};
    ++seen[sampler.sample(logits, {}).token];
  }
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_GT(seen[0], 700);
  EXPECT_GT(seen[1], 700);
}

TEST(Sampler, PenaltiesPushRepeatedTokensDown) {
  std::vector<float> logits = {2.0f, 1.9f};
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_once(greedy, logits, {0}), 0);
  SamplingParams presence = greedy;
  presence.presence_penalty = 0.5f;
  EXPECT_EQ(sample_once(presence, logits, {0}), 1);
  SamplingParams frequency = greedy;
  frequency.frequency_penalty = 0.06f;
  EXPECT_EQ(sample_once(frequency, logits, {0}), 0) << "one occurrence costs 0.06: still ahead";
  EXPECT_EQ(sample_once(frequency, logits, {0, 0}), 1) << "two cost 0.12: now behind";
  SamplingParams repetition = greedy;
  repetition.repetition_penalty = 1.1f;
  EXPECT_EQ(sample_once(repetition, logits, {0}), 1) << "2.0 / 1.1 < 1.9";
  SamplingParams windowed = presence;
  windowed.penalty_window = 1;
  EXPECT_EQ(sample_once(windowed, logits, {0, 1}), 0) << "only the last token is penalised";
}

TEST(Sampler, LogprobsComeFromTheUnshapedDistribution) {
  SamplingParams params;
  params.temperature = 0;
  params.logprobs = true;
  params.top_logprobs = 2;
  params.presence_penalty = 1.0f;  // shapes the choice, not the reported probabilities
  Sampler sampler(params);
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SampledToken sampled = sampler.sample(logits, std::vector<TokenId>{0});
  EXPECT_EQ(sampled.token, 1);
  EXPECT_NEAR(sampled.logprob, std::log(0.3), 1e-5);
  ASSERT_EQ(sampled.top.size(), 2u);
  EXPECT_EQ(sampled.top[0].token, 0);
  EXPECT_NEAR(sampled.top[0].logprob, std::log(0.5), 1e-5);
  EXPECT_EQ(sampled.top[1].token, 1);
}

}  // namespace
}  // namespace chatflow::engine

namespace chatflow::engine {
namespace {

// Speculative decoding's check keeps the target's distribution exactly, whatever the guess: over
// many draws, each token's frequency is its probability worked out here by hand (softmax at the
// temperature, then top-k renormalised), and the guess is kept as often as its probability.
TEST(Sampler, VerifyingAGuessKeepsTheDistributionOfTheDraw) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  struct Case {
    float temperature;
    int top_k;
    TokenId guess;
  };
  for (const Case& c : {Case{0.7f, 0, 0}, Case{0.7f, 0, 3}, Case{1.3f, 3, 2}, Case{1.0f, 3, 5}}) {
    std::vector<double> expected(logits.size(), 0.0);
    double total = 0;
    const size_t kept = c.top_k > 0 ? static_cast<size_t>(c.top_k) : logits.size();
    for (size_t i = 0; i < kept; ++i) {  // the logits are sorted already
      expected[i] = std::exp(static_cast<double>(logits[i]) / c.temperature);
      total += expected[i];
    }
    for (double& p : expected)
      p /= total;
    SamplingParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.seed = 99;
    Sampler sampler(params);
    const int draws = 200000;
    std::vector<int> counts(logits.size(), 0);
    int kept_guesses = 0;
    for (int i = 0; i < draws; ++i) {
      std::vector<float> row = logits;
      VerifiedToken verified = sampler.verify(row, {}, c.guess);
      ++counts[static_cast<size_t>(verified.token.token)];
      kept_guesses += verified.accepted;
      ASSERT_EQ(verified.accepted, verified.token.token == c.guess);
    }
    for (size_t i = 0; i < logits.size(); ++i) {
      // Five standard deviations of a frequency over 200,000 draws are at most 0.0056.
      EXPECT_NEAR(static_cast<double>(counts[i]) / draws, expected[i], 0.0056)
          << "token " << i << " at temperature " << c.temperature << ", top_k " << c.top_k
          << ", guess " << c.guess;
    }
    EXPECT_NEAR(static_cast<double>(kept_guesses) / draws, expected[static_cast<size_t>(c.guess)],
                0.0056);
  }
}

TEST(Sampler, VerifyingAGuessGreedilyKeepsItOnlyWhenItIsTheBest) {
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler sampler(greedy);
  std::vector<float> row = {0.1f, 2.0f, -1.0f};
  VerifiedToken best = sampler.verify(row, {}, 1);
  EXPECT_TRUE(best.accepted);
  EXPECT_EQ(best.token.token, 1);
  row = {0.1f, 2.0f, -1.0f};
  VerifiedToken other = sampler.verify(row, {}, 0);
  EXPECT_FALSE(other.accepted);
  EXPECT_EQ(other.token.token, 1);
}

}  // namespace
}  // namespace chatflow::engine
