// Speculative decoding by a draft model: the draft's guesses ride in the target's decode step and
// are kept only where the target agrees, so greedy answers are the target's own token for token
// (alone, batched, under preemption, with penalties); a draft that is the target itself is always
// right (its cache follows the tokens kept); sampled answers keep the target's distribution (a
// chi-square test against sampling without a draft); a draft with another vocabulary is refused.
#include "framework/engine/draft_model.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "framework/engine/generator.h"
#include "framework/engine/scheduler.h"
#include "support/engine_answers.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

using testing::RecordedAnswer;

ModelShape shape_of(kernels::TensorType type) {
  ModelShape shape;
  shape.dim = 128;
  shape.ffn = 256;
  shape.type = type;
  return shape;
}

std::shared_ptr<const Model> target_model() {
  return Model::load(testing::temp_model(shape_of(kernels::TensorType::q8_0)));
}

// The same random weights in another quantisation: agrees with the target on some tokens.
std::shared_ptr<const Model> quantised_draft() {
  return Model::load(testing::temp_model(shape_of(kernels::TensorType::q4_0)));
}

const std::vector<std::string> kPrompts = {
    "once",
    "the quick brown fox jumps over the lazy dog",
    "in a small village by the sea there lived an old fisherman and his cat",
    "hello world",
    "tell me a story about a robot who learns to paint the night sky",
    "she was",
};

SequenceSpec greedy(const Model& model, const std::string& text, int64_t max_tokens) {
  return testing::greedy_sequence(model, text, max_tokens);
}

std::vector<TokenId> alone(const std::shared_ptr<const Model>& model, const SequenceSpec& spec) {
  return testing::generated_alone(model, spec);
}

SchedulerStats idle_stats(const Scheduler& scheduler) {
  for (int i = 0; i < 5000; ++i) {
    SchedulerStats stats = scheduler.stats();
    if (stats.running == 0 && stats.waiting == 0) return stats;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "the scheduler did not go idle";
  return scheduler.stats();
}

// Runs every spec on one scheduler at once; their answers, and each one's usage in `usages`.
std::vector<std::vector<TokenId>> run_together(Scheduler& scheduler,
                                               const std::vector<SequenceSpec>& specs,
                                               std::vector<SequenceUsage>* usages = nullptr) {
  std::vector<std::shared_ptr<RecordedAnswer>> answers;
  for (const auto& spec : specs) {
    answers.push_back(std::make_shared<RecordedAnswer>());
    EXPECT_EQ(scheduler.submit(spec, answers.back()), std::nullopt);
  }
  std::vector<std::vector<TokenId>> tokens;
  for (const auto& answer : answers) {
    EXPECT_TRUE(answer->wait());
    EXPECT_EQ(answer->error(), "");
    tokens.push_back(answer->tokens());
    if (usages) usages->push_back(answer->usage());
  }
  return tokens;
}

// Each answer's own count of guesses (what the access log notes) adds up to the engine's.
void expect_usages_add_up(const std::vector<SequenceUsage>& usages, const SchedulerStats& stats) {
  int64_t drafted = 0;
  int64_t accepted = 0;
  for (const auto& usage : usages) {
    EXPECT_LE(usage.accepted_tokens, usage.drafted_tokens);
    drafted += usage.drafted_tokens;
    accepted += usage.accepted_tokens;
  }
  EXPECT_EQ(drafted, stats.drafted_tokens);
  EXPECT_EQ(accepted, stats.accepted_tokens);
}

TEST(DraftModel, AnotherQuantisationChangesNoGreedyAnswer) {
  auto model = target_model();
  auto draft = quantised_draft();
  for (int64_t kv_blocks : {0, 12}) {
    SchedulerConfig config;
    config.draft.model = draft;
    config.draft.max_draft = 4;
    config.kv_blocks = kv_blocks;  // 12: too few for everyone at once, so some are preempted
    config.max_batched_tokens = 64;
    Scheduler scheduler(model, config);
    std::vector<SequenceSpec> specs;
    for (size_t i = 0; i < kPrompts.size(); ++i)
      specs.push_back(greedy(*model, kPrompts[i], 24 + 5 * static_cast<int64_t>(i)));
    specs[1].sampling.repetition_penalty = 1.3f;  // the penalties see the guesses' tokens too
    specs[2].sampling.frequency_penalty = 0.5f;
    specs[3].max_tokens = 3;
    std::vector<SequenceUsage> usages;
    std::vector<std::vector<TokenId>> answers = run_together(scheduler, specs, &usages);
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(answers[i], alone(model, specs[i]))
          << "sequence " << i << " with " << kv_blocks << " KV blocks";
    }
    const SchedulerStats stats = idle_stats(scheduler);
    expect_usages_add_up(usages, stats);
    EXPECT_GT(stats.drafted_tokens, 0) << "no guesses were made: the test checks nothing";
    EXPECT_GT(stats.accepted_tokens, 0) << "no guess was kept: the test checks nothing";
    EXPECT_LT(stats.accepted_tokens, stats.drafted_tokens) << "no guess was refused";
    EXPECT_EQ(stats.sequence_blocks, 0);
    if (kv_blocks > 0) {
      EXPECT_GT(stats.preemptions, 0) << "the pool was meant to be too small";
    }
  }
}

// The target as its own draft guesses exactly what it then chooses: every guess is kept, so the
// draft's cache must hold exactly the tokens the target kept, step after step; and an answer takes
// fewer steps than it has tokens.
TEST(DraftModel, TheTargetAsItsOwnDraftIsAlwaysRight) {
  auto model = target_model();
  SchedulerConfig config;
  config.draft.model = model;
  config.draft.max_draft = 4;
  Scheduler scheduler(model, config);
  std::vector<SequenceSpec> specs;
  for (size_t i = 0; i < 3; ++i)
    specs.push_back(greedy(*model, kPrompts[i], 40));
  std::vector<SequenceUsage> usages;
  std::vector<std::vector<TokenId>> answers = run_together(scheduler, specs, &usages);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(answers[i], alone(model, specs[i]));
    EXPECT_GT(usages[i].drafted_tokens, 20);
    EXPECT_EQ(usages[i].accepted_tokens, usages[i].drafted_tokens);
  }
  const SchedulerStats stats = idle_stats(scheduler);
  expect_usages_add_up(usages, stats);
  EXPECT_GT(stats.drafted_tokens, 60);
  EXPECT_EQ(stats.accepted_tokens, stats.drafted_tokens);
  EXPECT_LT(stats.steps, 3 * 40 / 2) << "four guesses kept per step: far fewer steps than tokens";
}

// Sampling: the second answer token is the first a guess can stand for (the first comes from the
// prompt's step). Its distribution with a draft must be the target's own: a two-sample
// chi-square test over 1,500 answers each way, at a threshold a correct engine exceeds with
// probability about 1e-4; a check that kept every guess would fail it by far (the draft's
// greedy choice would take most of the mass).
TEST(DraftModel, SampledAnswersKeepTheTargetsDistribution) {
  auto model = target_model();
  auto draft = quantised_draft();
  SchedulerConfig plain;
  plain.max_seqs = 256;
  SchedulerConfig speculative = plain;
  speculative.draft.model = draft;
  speculative.draft.max_draft = 2;
  constexpr int kAnswers = 1500;
  auto second_tokens = [&](const SchedulerConfig& config, uint64_t seed_base) {
    Scheduler scheduler(model, config);
    std::vector<SequenceSpec> specs;
    for (int i = 0; i < kAnswers; ++i) {
      SequenceSpec spec = greedy(*model, "the quick brown fox", 3);
      spec.sampling.temperature = 0.15f;  // a random model's logits are close: sharpen them
      spec.sampling.seed = seed_base + static_cast<uint64_t>(i);
      spec.cache_salt = std::to_string(i % 7);
      specs.push_back(spec);
    }
    std::map<TokenId, int> counts;
    for (const auto& answer : run_together(scheduler, specs)) {
      EXPECT_EQ(answer.size(), 3u);
      if (answer.size() >= 2) ++counts[answer[1]];
    }
    SchedulerStats stats = idle_stats(scheduler);
    return std::make_pair(counts, stats);
  };
  auto [without, plain_stats] = second_tokens(plain, 1);
  auto [with, draft_stats] = second_tokens(speculative, 100000);
  EXPECT_GT(draft_stats.drafted_tokens, kAnswers / 2) << "guesses were meant to be made";
  EXPECT_GT(draft_stats.accepted_tokens, 0);
  EXPECT_LT(draft_stats.accepted_tokens, draft_stats.drafted_tokens);
  // Tokens seen fewer than 10 times in all are pooled into one bin.
  std::map<TokenId, std::pair<int, int>> bins;
  for (auto [token, count] : without)
    bins[token].first += count;
  for (auto [token, count] : with)
    bins[token].second += count;
  std::vector<std::pair<int, int>> pooled(1);
  for (auto [token, pair] : bins) {
    if (pair.first + pair.second < 10) {
      pooled[0].first += pair.first;
      pooled[0].second += pair.second;
    } else {
      pooled.push_back(pair);
    }
  }
  ASSERT_GE(pooled.size(), 4u) << "the distribution is too narrow to test anything";
  double chi_square = 0;
  int bins_used = 0;
  for (auto [a, b] : pooled) {
    if (a + b == 0) continue;
    chi_square += std::pow(a - b, 2) / static_cast<double>(a + b);  // equal sample sizes
    ++bins_used;
  }
  const int freedom = bins_used - 1;
  // Wilson-Hilferty: the chi-square quantile of about 1 - 1e-4 (z = 3.72).
  const double k = freedom;
  const double limit = k * std::pow(1 - 2 / (9 * k) + 3.72 * std::sqrt(2 / (9 * k)), 3);
  EXPECT_LT(chi_square, limit) << bins_used << " bins";
}

// A draft with a shorter context than the model's: a sequence past it decodes without guesses
// (no failure), the others keep theirs; with a catch-up of 8 tokens a step, a prompt reaches the
// draft over several steps before it guesses.
TEST(DraftModel, ASequencePastTheDraftsContextDecodesWithoutGuessesAndOthersKeepTheirs) {
  auto model = target_model();  // a context of 512
  ModelShape short_context = shape_of(kernels::TensorType::q8_0);
  short_context.context = 64;
  auto draft = Model::load(testing::temp_model(short_context));
  std::mutex reported_mutex;
  std::vector<std::string> reported;
  SchedulerConfig config;
  config.draft = {
      .model = draft, .max_draft = 4, .max_catch_up = 8, .report = [&](const std::string& line) {
        std::lock_guard lock(reported_mutex);
        reported.push_back(line);
      }};
  Scheduler scheduler(model, config);
  const std::string long_prompt = kPrompts[2] + " " + kPrompts[2] + " " + kPrompts[2];
  std::vector<SequenceSpec> specs = {greedy(*model, long_prompt, 30),
                                     greedy(*model, kPrompts[0], 30),
                                     greedy(*model, kPrompts[3], 30)};
  ASSERT_GT(specs[0].prompt.size(), 64u);
  ASSERT_LT(specs[1].prompt.size() + 30, 64u);
  std::vector<SequenceUsage> usages;
  std::vector<std::vector<TokenId>> answers = run_together(scheduler, specs, &usages);
  for (size_t i = 0; i < specs.size(); ++i)
    EXPECT_EQ(answers[i], alone(model, specs[i]));
  EXPECT_EQ(usages[0].drafted_tokens, 0);
  EXPECT_GT(usages[1].drafted_tokens, 0);
  EXPECT_GT(usages[2].drafted_tokens, 0);
  expect_usages_add_up(usages, idle_stats(scheduler));
  std::lock_guard lock(reported_mutex);
  EXPECT_TRUE(reported.empty()) << reported.front();
}

TEST(DraftModel, ADraftWithAnotherVocabularyIsRefused) {
  auto model = target_model();
  // A llama model whose vocabulary is a generated WordPiece one, as bert files get.
  ModelShape bert = shape_of(kernels::TensorType::f32);
  bert.architecture = "bert";
  bert.kv_heads = bert.heads;
  ModelShape worded = shape_of(kernels::TensorType::q8_0);
  worded.vocabulary_from = testing::temp_model(bert);
  auto other = Model::load(testing::temp_model(worded));
  const std::string mismatch = draft_mismatch(*model, *other);
  EXPECT_NE(mismatch.find("a draft must share the model's vocabulary"), std::string::npos)
      << mismatch;
  EXPECT_EQ(draft_mismatch(*model, *quantised_draft()), "");
  SchedulerConfig config;
  config.draft.model = other;
  config.draft.max_draft = 4;
  EXPECT_THROW(Scheduler(model, config), std::invalid_argument);
}

}  // namespace
}  // namespace chatflow::engine
