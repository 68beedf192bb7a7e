// A grammar as a sequence's constraint: nothing is masked before a trigger appears, only what
// continues the grammar after it, the end of generation only where the text may end, and the
// scheduler ends a sequence whose grammar is complete, leaving the other sequences of its batch
// as they would be alone.
#include "framework/engine/grammar_constraint.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/engine/generator.h"
#include "framework/engine/scheduler.h"
#include "support/temp_model.h"

namespace chatflow::engine {
namespace {

// Token ids of a hand-made vocabulary; 12 stands for end of generation (no bytes).
const std::vector<std::string> kTokens = {"<",
                                          "tool",
                                          "_call",
                                          ">",
                                          "<tool_call>",
                                          "1",
                                          "2",
                                          "12",
                                          "x",
                                          " ",
                                          "a",
                                          "b",
                                          "",  // 12: the end of generation
                                          "<tool_call>x",
                                          "<tool_call>2",
                                          "<think>",
                                          "</think>",
                                          "\n\n",
                                          "<th",
                                          "ink>"};
constexpr TokenId kEnd = 12;

std::shared_ptr<GrammarMasks> masks_for(grammar::GrammarBuilder& builder,
                                        grammar::GrammarBuilder::Expr root) {
  return std::make_shared<GrammarMasks>(builder.build(root), grammar::make_token_table(kTokens),
                                        std::vector<TokenId>{kEnd});
}

// The ids `constraint` lets through, logits all zero before.
std::vector<TokenId> allowed(TokenConstraint& constraint) {
  std::vector<float> logits(kTokens.size(), 0.0f);
  constraint.restrict(logits);
  std::vector<TokenId> ids;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isinf(logits[i])) ids.push_back(static_cast<TokenId>(i));
  }
  return ids;
}

TEST(GrammarConstraint, WaitsForItsTriggerThenHoldsTheText) {
  grammar::GrammarBuilder builder;
  auto digits = builder.repeat(builder.chars({{'1', '2'}}), 1, -1);
  auto masks = masks_for(builder, builder.sequence({builder.literal("<tool_call>"), digits}));
  auto constraint = masks->start({"<tool_call>", false});
  // Free before the trigger, but for the one token that would complete it with what the
  // grammar refuses.
  std::vector<TokenId> free_but_a_bad_start;
  for (size_t i = 0; i < kTokens.size(); ++i) {
    if (i != 13) free_but_a_bad_start.push_back(static_cast<TokenId>(i));
  }
  EXPECT_EQ(allowed(*constraint), free_but_a_bad_start);
  for (TokenId token : {8, 9, 0, 1}) {  // "x <tool" in pieces
    constraint->accept(token);
    EXPECT_EQ(allowed(*constraint), free_but_a_bad_start);
  }
  constraint->accept(2);
  constraint->accept(3);  // ">": the trigger is whole
  EXPECT_EQ(allowed(*constraint), (std::vector<TokenId>{5, 6, 7})) << "digits only, no end yet";
  EXPECT_FALSE(constraint->complete());
  constraint->accept(7);
  EXPECT_EQ(allowed(*constraint), (std::vector<TokenId>{5, 6, 7, kEnd})) << "may end now";
  EXPECT_FALSE(constraint->complete()) << "more digits may follow";
}

TEST(GrammarConstraint, ATokenThatCompletesTheTriggerStartsTheGrammarInside) {
  grammar::GrammarBuilder builder;
  auto digits = builder.repeat(builder.chars({{'1', '2'}}), 1, -1);
  auto masks = masks_for(builder, builder.sequence({builder.literal("<tool_call>"), digits}));
  auto constraint = masks->start({"<tool_call>", false});
  constraint->accept(14);  // "<tool_call>2": the trigger and the grammar's first digit at once
  EXPECT_TRUE(constraint->engaged());
  EXPECT_EQ(allowed(*constraint), (std::vector<TokenId>{5, 6, 7, kEnd}));
}

TEST(GrammarConstraint, AThinkingBlockComesBeforeTheGrammar) {
  grammar::GrammarBuilder builder;
  auto masks = masks_for(builder, builder.sequence({builder.repeat(builder.literal("\n"), 0, 3),
                                                    builder.literal("ab")}));
  // The prompt opened the block: free until it closes, then the grammar.
  auto opened = masks->start({"", false, GrammarMasks::Reasoning::open});
  EXPECT_EQ(allowed(*opened).size(), kTokens.size());
  for (TokenId token : {8, 10, 11, 9}) {  // thinking "xab "
    opened->accept(token);
    EXPECT_FALSE(opened->engaged());
  }
  opened->accept(16);  // "</think>"
  EXPECT_TRUE(opened->engaged());
  EXPECT_EQ(allowed(*opened), (std::vector<TokenId>{10, 17}));  // "a" or the line breaks
  // The answer may open one: what starts "<think>" or the grammar; then the same.
  auto optional = masks->start({"", false, GrammarMasks::Reasoning::optional});
  EXPECT_EQ(allowed(*optional), (std::vector<TokenId>{0, 9, 10, 15, 17, 18}));
  optional->accept(18);                                       // "<th"
  EXPECT_EQ(allowed(*optional), (std::vector<TokenId>{19}));  // only "ink>" continues it
  optional->accept(19);
  EXPECT_FALSE(optional->engaged());
  optional->accept(16);
  EXPECT_TRUE(optional->engaged());
  // Or it does not think, and the grammar held from the first token.
  auto direct = masks->start({"", false, GrammarMasks::Reasoning::optional});
  direct->accept(10);
  EXPECT_TRUE(direct->engaged());
  EXPECT_EQ(allowed(*direct), (std::vector<TokenId>{11}));
}

TEST(GrammarConstraint, FromTheFirstTokenAndCompleteWhenNothingMayFollow) {
  grammar::GrammarBuilder builder;
  auto masks = masks_for(builder, builder.choice({builder.literal("ab"), builder.literal("b")}));
  auto constraint = masks->start({});
  EXPECT_EQ(allowed(*constraint), (std::vector<TokenId>{10, 11}));
  constraint->accept(10);
  EXPECT_EQ(allowed(*constraint), (std::vector<TokenId>{11}));
  EXPECT_FALSE(constraint->complete());
  constraint->accept(11);
  EXPECT_TRUE(constraint->complete());
}

TEST(GrammarConstraint, AtStartTriggersGiveUpOnOtherText) {
  grammar::GrammarBuilder builder;
  auto masks = masks_for(builder, builder.literal("ab"));
  auto constraint = masks->start({"a", true});
  constraint->accept(8);  // "x": the answer is text, never a call
  constraint->accept(10);
  EXPECT_EQ(allowed(*constraint).size(), kTokens.size());
  auto called = masks->start({"a", true});
  called->accept(9);   // spaces before it do not count
  called->accept(10);  // "a" opens the grammar
  EXPECT_EQ(allowed(*called), (std::vector<TokenId>{11}));
}

// A grammar whose first mask needs a state not yet cached.
std::shared_ptr<GrammarMasks> digits_masks(MaskBudget budget = {}) {
  grammar::GrammarBuilder builder;
  auto root = builder.sequence(
      {builder.literal("<tool_call>"), builder.repeat(builder.chars({{'1', '2'}}), 1, -1)});
  return std::make_shared<GrammarMasks>(builder.build(root), grammar::make_token_table(kTokens),
                                        std::vector<TokenId>{kEnd}, budget);
}

TEST(GrammarConstraint, PreparedWorkComputesTheMaskOffTheEngineThread) {
  auto constraint = digits_masks()->start({});
  std::function<void()> work = constraint->prepare();
  ASSERT_TRUE(work) << "a mask never computed is work for elsewhere";
  std::thread worker(work);
  worker.join();
  EXPECT_FALSE(constraint->prepare()) << "the mask is ready now";
  EXPECT_EQ(allowed(*constraint), (std::vector<TokenId>{0, 4, 14}));
  constraint->accept(4);  // "<tool_call>"
  std::function<void()> next = constraint->prepare();
  ASSERT_TRUE(next) << "a new state, a new mask";
  next();
  EXPECT_FALSE(constraint->prepare());
  EXPECT_EQ(allowed(*constraint), (std::vector<TokenId>{5, 6, 7}));
  EXPECT_EQ(constraint->failure(), "");
}

TEST(GrammarConstraint, AbandonedWorkStopsWithoutAMask) {
  auto masks = digits_masks();
  auto constraint = masks->start({});
  std::function<void()> work = constraint->prepare();
  ASSERT_TRUE(work);
  constraint->abandon();
  work();
  EXPECT_EQ(constraint->failure(), "") << "stopping is not failing";
  // Nothing was computed, so nothing was cached: the same state needs the work again.
  auto another = masks->start({});
  EXPECT_TRUE(another->prepare());
}

TEST(GrammarConstraint, MaskTimeOverTheBudgetFailsTheSequence) {
  auto constraint = digits_masks(MaskBudget{std::chrono::milliseconds(0)})->start({});
  EXPECT_FALSE(constraint->prepare());
  EXPECT_NE(constraint->failure().find("token masks took more than 0 ms"), std::string::npos)
      << constraint->failure();
}

TEST(GrammarConstraint, AGrammarOverItsLimitsFailsTheSequenceNotTheEngine) {
  grammar::GrammarBuilder builder;
  std::vector<grammar::GrammarBuilder::Expr> words;
  for (int i = 0; i < 10; ++i)
    words.push_back(builder.sequence({builder.literal("a"), builder.literal(std::to_string(i))}));
  grammar::GrammarLimits limits;
  limits.max_stacks = 4;
  auto masks = std::make_shared<GrammarMasks>(builder.build(builder.choice(words), limits),
                                              grammar::make_token_table(kTokens),
                                              std::vector<TokenId>{kEnd});
  auto constraint = masks->start({});
  EXPECT_NE(constraint->failure().find("readings of the text alive"), std::string::npos)
      << constraint->failure();
}

class Collector final : public SequenceObserver {
 public:
  void on_token(const SampledToken& token, bool, const SequenceUsage&) override {
    std::lock_guard lock(mutex_);
    tokens_.push_back(token.token);
  }
  void on_finish(FinishCause cause, const SequenceUsage&) override { done(cause); }
  void on_error(const std::string&) override { done(std::nullopt); }
  bool cancelled() const override { return false; }

  std::optional<FinishCause> wait() {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(60), [this] { return finished_; });
    return cause_;
  }
  std::vector<TokenId> tokens() {
    std::lock_guard lock(mutex_);
    return tokens_;
  }

 private:
  void done(std::optional<FinishCause> cause) {
    std::lock_guard lock(mutex_);
    cause_ = cause;
    finished_ = true;
    changed_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<TokenId> tokens_;
  std::optional<FinishCause> cause_;
  bool finished_ = false;
};

TEST(GrammarConstraint, TheSchedulerEndsAConstrainedSequenceAndLeavesItsBatchAlone) {
  ModelShape shape;
  auto model = Model::load(testing::temp_model(shape));
  const Tokenizer& tokenizer = model->tokenizer();
  auto schema = boost::json::parse(
      R"({"type":"object","properties":{"colour":{"enum":["red","green","blue"]},)"
      R"("n":{"type":"integer","minimum":-3,"maximum":3}},"required":["colour","n"]})");
  const auto& ends = tokenizer.vocabulary().end_of_generation;
  auto masks = std::make_shared<GrammarMasks>(grammar::compile_json_schema(schema),
                                              token_table_of(tokenizer),
                                              std::vector<TokenId>(ends.begin(), ends.end()));
  Scheduler scheduler(model, SchedulerConfig{});
  std::vector<std::shared_ptr<Collector>> constrained, free;
  SequenceSpec plain;
  plain.prompt = tokenizer.encode("tell me a story", true);
  plain.sampling.temperature = 0;
  plain.max_tokens = 24;
  plain.ignore_eos = true;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SequenceSpec spec;
    spec.prompt = tokenizer.encode("colour and number", true);
    spec.sampling.seed = seed;
    spec.max_tokens = 200;
    spec.constraint = masks->start({});
    constrained.push_back(std::make_shared<Collector>());
    ASSERT_FALSE(scheduler.submit(spec, constrained.back()));
    free.push_back(std::make_shared<Collector>());
    ASSERT_FALSE(scheduler.submit(plain, free.back()));
  }
  Generator generator(model, 1);
  GenerationRequest alone;
  alone.prompt = plain.prompt;
  alone.sampling = plain.sampling;
  alone.max_tokens = plain.max_tokens;
  alone.ignore_eos = true;
  std::vector<TokenId> expected = generator.generate(alone).tokens;
  for (size_t i = 0; i < constrained.size(); ++i) {
    EXPECT_EQ(constrained[i]->wait(), FinishCause::end_of_generation);
    std::string text = tokenizer.decode(constrained[i]->tokens());
    boost::json::error_code error;
    boost::json::value value = boost::json::parse(text, error);
    ASSERT_FALSE(error) << text;
    std::string colour(value.at("colour").as_string());
    EXPECT_TRUE(colour == "red" || colour == "green" || colour == "blue") << text;
    EXPECT_LE(std::abs(value.at("n").as_int64()), 3) << text;
    EXPECT_EQ(free[i]->wait(), FinishCause::length);
    EXPECT_EQ(free[i]->tokens(), expected) << "a constrained neighbour changed a free sequence";
  }
}

}  // namespace
}  // namespace chatflow::engine
