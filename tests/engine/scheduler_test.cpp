// Continuous batching: sequences decoded together give exactly the tokens each gives alone;
// shared prefixes are computed once per tenant; cancelled sequences free their blocks; and a
// pool too small for everyone preempts and still finishes every request correctly.
#include "framework/engine/scheduler.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "framework/engine/generator.h"
#include "framework/engine/grammar_constraint.h"
#include "support/engine_answers.h"
#include "support/slow_mask.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

class Collector final : public SequenceObserver {
 public:
  explicit Collector(int cancel_after = -1) : cancel_after_(cancel_after) {}

  void on_token(const SampledToken& token, bool first, const SequenceUsage&) override {
    std::lock_guard lock(mutex_);
    if (first != tokens_.empty()) first_flag_wrong_ = true;
    tokens_.push_back(token.token);
    if (cancel_after_ >= 0 && static_cast<int>(tokens_.size()) >= cancel_after_) cancelled_ = true;
  }
  void on_finish(FinishCause cause, const SequenceUsage& usage) override {
    std::lock_guard lock(mutex_);
    cause_ = cause;
    usage_ = usage;
    done_ = true;
    changed_.notify_all();
  }
  void on_error(const std::string& message) override {
    std::lock_guard lock(mutex_);
    error_ = message;
    done_ = true;
    changed_.notify_all();
  }
  bool cancelled() const override { return cancelled_.load(); }

  bool wait(std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [this] { return done_; });
  }
  void cancel() { cancelled_ = true; }
  std::vector<TokenId> tokens() const {
    std::lock_guard lock(mutex_);
    return tokens_;
  }
  SequenceUsage usage() const {
    std::lock_guard lock(mutex_);
    return usage_;
  }
  std::string error() const {
    std::lock_guard lock(mutex_);
    return error_;
  }
  bool first_flag_wrong() const { return first_flag_wrong_; }

 private:
  int cancel_after_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<TokenId> tokens_;
  std::optional<FinishCause> cause_;
  SequenceUsage usage_;
  std::string error_;
  bool done_ = false;
  bool first_flag_wrong_ = false;
  std::atomic<bool> cancelled_{false};
};

std::shared_ptr<const Model> test_model() {
  ModelShape shape;  // the writer's defaults otherwise
  shape.ffn = 96;
  shape.type = kernels::TensorType::q8_0;
  return Model::load(testing::temp_model(shape));
}

const std::vector<std::string> kPrompts = {
    "once",        "the quick brown fox jumps over the lazy dog",
    "a",           "in a small village by the sea there lived an old fisherman and his cat",
    "hello world", "tell me a story about a robot who learns to paint the night sky with stars and",
    "x y z",       "she was",
};

SequenceSpec greedy(const Model& model, const std::string& text, int64_t max_tokens = 12) {
  return testing::greedy_sequence(model, text, max_tokens);
}

std::vector<TokenId> alone(const std::shared_ptr<const Model>& model, const SequenceSpec& spec) {
  return testing::generated_alone(model, spec);
}

void wait_until_idle(const Scheduler& scheduler) {
  for (int i = 0; i < 5000; ++i) {
    auto stats = scheduler.stats();
    if (stats.running == 0 && stats.waiting == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  FAIL() << "the scheduler did not go idle";
}

class BatchedEqualsAlone : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(BatchedEqualsAlone, GreedyTokensDoNotDependOnTheBatch) {
  auto [count, chunked] = GetParam();
  auto model = test_model();
  SchedulerConfig config;
  config.max_seqs = 16;
  config.max_batched_tokens = 24;  // small: prompts are chunked and share steps with decoding
  config.chunked_prefill = chunked;
  Scheduler scheduler(model, config);
  std::vector<SequenceSpec> specs;
  std::vector<std::shared_ptr<Collector>> collectors;
  for (int i = 0; i < count; ++i) {
    specs.push_back(greedy(*model,
                           kPrompts[static_cast<size_t>(i) % kPrompts.size()] +
                               std::string(static_cast<size_t>(i / 8), '!'),
                           10 + i % 5));
    collectors.push_back(std::make_shared<Collector>());
  }
  for (int i = 0; i < count; ++i)
    ASSERT_FALSE(
        scheduler.submit(specs[static_cast<size_t>(i)], collectors[static_cast<size_t>(i)]));
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE(collectors[static_cast<size_t>(i)]->wait());
    EXPECT_EQ(collectors[static_cast<size_t>(i)]->error(), "");
    EXPECT_EQ(collectors[static_cast<size_t>(i)]->tokens(),
              alone(model, specs[static_cast<size_t>(i)]))
        << "sequence " << i;
    EXPECT_FALSE(collectors[static_cast<size_t>(i)]->first_flag_wrong());
  }
}

INSTANTIATE_TEST_SUITE_P(SequencesAndChunking, BatchedEqualsAlone,
                         ::testing::Combine(::testing::Values(1, 4, 16), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_sequences_" +
                                  (std::get<1>(info.param) ? "chunked" : "whole_prompts");
                         });

TEST(Scheduler, SeededSamplingIsTheSameInABatchAsAlone) {
  auto model = test_model();
  Scheduler scheduler(model, SchedulerConfig{});
  std::vector<SequenceSpec> specs;
  std::vector<std::shared_ptr<Collector>> collectors;
  for (int i = 0; i < 6; ++i) {
    SequenceSpec spec = greedy(*model, kPrompts[static_cast<size_t>(i)]);
    spec.sampling.temperature = 0.9f;
    spec.sampling.top_k = 20;
    spec.sampling.seed = 100 + static_cast<uint64_t>(i);
    specs.push_back(spec);
    collectors.push_back(std::make_shared<Collector>());
    ASSERT_FALSE(scheduler.submit(spec, collectors.back()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(collectors[i]->wait());
    EXPECT_EQ(collectors[i]->tokens(), alone(model, specs[i])) << "sequence " << i;
  }
}

TEST(Scheduler, SharedPrefixIsComputedOnceAndOnlyForTheSameTenant) {
  auto model = test_model();
  Scheduler scheduler(model, SchedulerConfig{});
  std::string prefix =
      "You are a helpful assistant. Answer briefly and truthfully, and say so when you do not "
      "know. "
      "The user asks:";
  SequenceSpec first = greedy(*model, prefix + " what is the sea?");
  first.cache_salt = "tenant-a";
  auto first_collector = std::make_shared<Collector>();
  ASSERT_FALSE(scheduler.submit(first, first_collector));
  ASSERT_TRUE(first_collector->wait());
  wait_until_idle(scheduler);
  int64_t after_first = scheduler.stats().prompt_tokens_computed;
  EXPECT_EQ(after_first, static_cast<int64_t>(first.prompt.size()));
  EXPECT_EQ(first_collector->usage().cached_tokens, 0);

  SequenceSpec second = greedy(*model, prefix + " why is the sky blue?");
  second.cache_salt = "tenant-a";
  size_t shared = 0;
  while (shared < std::min(first.prompt.size(), second.prompt.size()) &&
         first.prompt[shared] == second.prompt[shared])
    ++shared;
  int64_t reusable = static_cast<int64_t>(shared) / 16 * 16;
  ASSERT_GE(reusable, 64) << "the test prefix should span several blocks";
  auto second_collector = std::make_shared<Collector>();
  ASSERT_FALSE(scheduler.submit(second, second_collector));
  ASSERT_TRUE(second_collector->wait());
  wait_until_idle(scheduler);
  int64_t computed = scheduler.stats().prompt_tokens_computed - after_first;
  EXPECT_EQ(computed, static_cast<int64_t>(second.prompt.size()) - reusable)
      << "only the new tokens are computed";
  EXPECT_EQ(second_collector->usage().cached_tokens, reusable);
  EXPECT_EQ(second_collector->tokens(), alone(model, second))
      << "reused blocks give the same answer";

  SequenceSpec other_tenant = second;
  other_tenant.cache_salt = "tenant-b";
  auto other_collector = std::make_shared<Collector>();
  int64_t before_other = scheduler.stats().prompt_tokens_computed;
  ASSERT_FALSE(scheduler.submit(other_tenant, other_collector));
  ASSERT_TRUE(other_collector->wait());
  wait_until_idle(scheduler);
  EXPECT_EQ(scheduler.stats().prompt_tokens_computed - before_other,
            static_cast<int64_t>(other_tenant.prompt.size()))
      << "another tenant reuses nothing";
  EXPECT_EQ(other_collector->usage().cached_tokens, 0);
  EXPECT_EQ(other_collector->tokens(), second_collector->tokens());
}

TEST(Scheduler, CancellingMidGenerationReturnsEveryBlock) {
  auto model = test_model();
  SchedulerConfig config;
  config.prefix_cache = false;
  Scheduler scheduler(model, config);
  std::vector<std::shared_ptr<Collector>> collectors;
  for (int i = 0; i < 4; ++i) {
    collectors.push_back(std::make_shared<Collector>(2));
    ASSERT_FALSE(
        scheduler.submit(greedy(*model, kPrompts[static_cast<size_t>(i)], 200), collectors.back()));
  }
  wait_until_idle(scheduler);
  auto stats = scheduler.stats();
  EXPECT_EQ(stats.free_blocks, stats.total_blocks) << "the pool is full again";
  EXPECT_EQ(stats.sequence_blocks, 0);
  for (const auto& collector : collectors)
    EXPECT_LT(collector->tokens().size(), 10u) << "generation stopped early";
}

TEST(Scheduler, WithPrefixCachingCancelledBlocksAreFreeOrEvictable) {
  auto model = test_model();
  Scheduler scheduler(model, SchedulerConfig{});
  auto collector = std::make_shared<Collector>(3);
  ASSERT_FALSE(scheduler.submit(greedy(*model, kPrompts[3], 200), collector));
  wait_until_idle(scheduler);
  auto stats = scheduler.stats();
  EXPECT_EQ(stats.sequence_blocks, 0);
  EXPECT_EQ(stats.free_blocks + stats.evictable_blocks, stats.total_blocks);
}

TEST(Scheduler, PreemptionUnderATinyPoolStillCompletesEveryRequestCorrectly) {
  auto model = test_model();
  SchedulerConfig config;
  config.kv_blocks = 12;  // 192 positions for six sequences needing ~45 each
  config.max_batched_tokens = 64;
  Scheduler scheduler(model, config);
  std::vector<SequenceSpec> specs;
  std::vector<std::shared_ptr<Collector>> collectors;
  for (int i = 0; i < 6; ++i) {
    specs.push_back(greedy(*model, kPrompts[static_cast<size_t>(i)], 30));
    collectors.push_back(std::make_shared<Collector>());
    ASSERT_FALSE(scheduler.submit(specs.back(), collectors.back()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(collectors[i]->wait());
    EXPECT_EQ(collectors[i]->error(), "");
    EXPECT_EQ(collectors[i]->tokens(), alone(model, specs[i])) << "sequence " << i;
  }
  EXPECT_GT(scheduler.stats().preemptions, 0)
      << "the pool was meant to be too small for everyone at once";
}

// Speculative decoding by prompt lookup: the guesses the model confirms are kept, the rest are
// taken back (tokens and KV), so every greedy answer is the one decoding without guesses gives,
// token for token: alone, batched with others, at max_tokens, with penalties, under preemption.
// Prompts that repeat themselves make guesses; random weights confirm some of them.
TEST(Scheduler, PromptLookupChangesNoGreedyAnswer) {
  auto model = test_model();
  for (int64_t kv_blocks : {0, 24}) {
    SchedulerConfig config;
    config.prompt_lookup = {.max_draft = 5, .longest_ngram = 3, .shortest_ngram = 1};
    config.kv_blocks = kv_blocks;  // 24: too few for everyone at once, so some are preempted
    config.max_batched_tokens = 48;
    Scheduler scheduler(model, config);
    std::vector<SequenceSpec> specs;
    for (int i = 0; i < 6; ++i) {
      std::string text;
      for (int r = 0; r < 2 + i % 3; ++r)
        text += kPrompts[static_cast<size_t>(i)] + " ";
      specs.push_back(greedy(*model, text, 24 + 5 * i));
    }
    specs[1].sampling.repetition_penalty = 1.3f;  // the penalties see the guesses' tokens too
    specs[2].sampling.frequency_penalty = 0.5f;
    specs[3].max_tokens = 7;
    std::vector<std::shared_ptr<Collector>> collectors;
    for (const auto& spec : specs) {
      collectors.push_back(std::make_shared<Collector>());
      ASSERT_EQ(scheduler.submit(spec, collectors.back()), std::nullopt);
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      ASSERT_TRUE(collectors[i]->wait());
      EXPECT_EQ(collectors[i]->error(), "");
      EXPECT_EQ(collectors[i]->tokens(), alone(model, specs[i]))
          << "sequence " << i << " with " << kv_blocks << " KV blocks";
      EXPECT_EQ(collectors[i]->usage().completion_tokens, specs[i].max_tokens);
      EXPECT_FALSE(collectors[i]->first_flag_wrong());
    }
    wait_until_idle(scheduler);
    const SchedulerStats stats = scheduler.stats();
    EXPECT_GT(stats.drafted_tokens, 0) << "no guesses were made: the test checks nothing";
    EXPECT_GT(stats.accepted_tokens, 0) << "no guess was confirmed: the test checks nothing";
    EXPECT_LT(stats.accepted_tokens, stats.drafted_tokens);
    EXPECT_EQ(stats.sequence_blocks, 0);
    if (kv_blocks > 0) {
      EXPECT_GT(stats.preemptions, 0) << "the pool was meant to be too small for everyone";
    }
  }
}

// A sampled answer is checked guess by guess with the sampling rule (Sampler.Verifying* shows it
// keeps the distribution): with a seed it is reproducible, as long as asked, and guesses are made
// and some kept.
TEST(Scheduler, PromptLookupChecksSampledAnswersAndTheyStayReproducible) {
  auto model = test_model();
  SchedulerConfig config;
  config.prompt_lookup = {.max_draft = 5, .longest_ngram = 3, .shortest_ngram = 1};
  Scheduler scheduler(model, config);
  SequenceSpec spec = greedy(*model, kPrompts[1] + " " + kPrompts[1] + " " + kPrompts[1], 40);
  spec.sampling.temperature = 0.05f;  // a random model's logits are close: sharpen them
  spec.sampling.seed = 11;
  std::vector<std::vector<TokenId>> answers;
  for (int run = 0; run < 2; ++run) {
    auto collector = std::make_shared<Collector>();
    ASSERT_FALSE(scheduler.submit(spec, collector));
    ASSERT_TRUE(collector->wait());
    EXPECT_EQ(collector->error(), "");
    answers.push_back(collector->tokens());
  }
  EXPECT_EQ(answers[0].size(), 40u);
  EXPECT_EQ(answers[0], answers[1]) << "the same seed, the same answer";
  wait_until_idle(scheduler);
  EXPECT_GT(scheduler.stats().drafted_tokens, 0);
  EXPECT_GT(scheduler.stats().accepted_tokens, 0);
}

using testing::SlowMask;

TEST(Scheduler, ASequenceWaitingForItsMaskHoldsUpNoOtherSequence) {
  auto model = test_model();
  Scheduler scheduler(model, SchedulerConfig{});
  auto gate = std::make_shared<SlowMask::Gate>();
  SequenceSpec slow = greedy(*model, kPrompts[1], 4);
  slow.constraint = std::make_shared<SlowMask>(gate);
  auto slow_tokens = std::make_shared<Collector>();
  ASSERT_FALSE(scheduler.submit(slow, slow_tokens));
  SequenceSpec other = greedy(*model, kPrompts[3], 24);
  auto other_tokens = std::make_shared<Collector>();
  ASSERT_FALSE(scheduler.submit(other, other_tokens));
  // Every one of the other sequence's tokens comes while the mask is still being computed.
  bool other_finished = other_tokens->wait(std::chrono::seconds(20));
  EXPECT_TRUE(other_finished) << "the other sequence stalled behind a mask";
  EXPECT_EQ(other_tokens->tokens(), alone(model, other));
  EXPECT_TRUE(slow_tokens->tokens().empty()) << "the slow sequence sampled without its mask";
  gate->set(&SlowMask::Gate::open);
  ASSERT_TRUE(slow_tokens->wait());
  EXPECT_EQ(slow_tokens->error(), "");
  EXPECT_EQ(slow_tokens->tokens(), alone(model, greedy(*model, kPrompts[1], 4)));
}

TEST(Scheduler, ACancelledSequenceStopsItsMaskWork) {
  auto model = test_model();
  Scheduler scheduler(model, SchedulerConfig{});
  auto gate = std::make_shared<SlowMask::Gate>();
  SequenceSpec slow = greedy(*model, kPrompts[0], 4);
  slow.constraint = std::make_shared<SlowMask>(gate);
  auto collector = std::make_shared<Collector>();
  ASSERT_FALSE(scheduler.submit(slow, collector));
  EXPECT_TRUE(gate->wait_for([&] { return gate->started; })) << "the mask work never started";
  collector->cancel();
  bool abandoned = gate->wait_for([&] { return gate->abandoned; });
  EXPECT_TRUE(abandoned) << "the work of a cancelled sequence ran on";
  gate->set(&SlowMask::Gate::open);  // lets a scheduler that never abandons shut down
  wait_until_idle(scheduler);
  EXPECT_TRUE(collector->tokens().empty());
}

TEST(Scheduler, AConstraintOverItsBudgetEndsItsSequenceWithAnError) {
  auto model = test_model();
  Scheduler scheduler(model, SchedulerConfig{});
  const Tokenizer& tokenizer = model->tokenizer();
  const auto& ends = tokenizer.vocabulary().end_of_generation;
  grammar::GrammarBuilder builder;
  auto masks = std::make_shared<GrammarMasks>(
      builder.build(builder.any_json_object()), token_table_of(tokenizer),
      std::vector<TokenId>(ends.begin(), ends.end()), MaskBudget{std::chrono::milliseconds(0)});
  SequenceSpec spec = greedy(*model, kPrompts[0], 8);
  spec.constraint = masks->start({});
  auto collector = std::make_shared<Collector>();
  ASSERT_FALSE(scheduler.submit(spec, collector));
  SequenceSpec other = greedy(*model, kPrompts[2], 8);
  auto other_tokens = std::make_shared<Collector>();
  ASSERT_FALSE(scheduler.submit(other, other_tokens));
  ASSERT_TRUE(collector->wait());
  EXPECT_NE(collector->error().find("token masks took more than 0 ms"), std::string::npos)
      << collector->error();
  ASSERT_TRUE(other_tokens->wait());
  EXPECT_EQ(other_tokens->tokens(), alone(model, other));
  wait_until_idle(scheduler);
  EXPECT_EQ(scheduler.stats().free_blocks + scheduler.stats().evictable_blocks,
            scheduler.stats().total_blocks);
}

TEST(Scheduler, RequestThatCanNeverFitIsRefusedUpFront) {
  auto model = test_model();
  SchedulerConfig config;
  config.kv_blocks = 4;  // 64 positions
  Scheduler scheduler(model, config);
  auto collector = std::make_shared<Collector>();
  SequenceSpec too_long_for_context = greedy(*model, "hello", 600);
  auto error = scheduler.submit(too_long_for_context, collector);
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("maximum context length is 512 tokens"), std::string::npos) << *error;
  SequenceSpec too_big_for_cache = greedy(*model, "hello", 100);
  error = scheduler.submit(too_big_for_cache, collector);
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("the cache holds 64"), std::string::npos) << *error;
  SequenceSpec bad_token = greedy(*model, "hello");
  bad_token.prompt.push_back(99999);
  EXPECT_TRUE(scheduler.submit(bad_token, collector));
}

}  // namespace
}  // namespace chatflow::engine
