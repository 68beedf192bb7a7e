#include <filesystem>
#include <unistd.h>

#include <gtest/gtest.h>

#include "framework/history/history_store.h"
#include "framework/history/trim.h"
#include "stages/gguf_model.h"
#include "support/temp_model.h"

namespace chatflow::history {
namespace {

TEST(HistoryStore, SqliteKeepsTurnsAcrossReopening) {
  std::string path = testing::temp_path("history-" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  {
    auto store = make_sqlite_store(path);
    store->append("acme", "s1", {"hi", "hello", TurnStatus::completed, 3, 4, 0}, true);
    store->append("acme", "s1", {"and?", "", TurnStatus::cancelled, 5, 0, 0}, false);
    store->append("acme", "s2", {"other", "session", TurnStatus::completed, 1, 1, 0}, false);
    store->append("globex", "s1", {"same id", "other tenant", TurnStatus::completed, 1, 1, 0},
                  true);
    EXPECT_EQ(store->load("acme", "s1").size(), 2u) << "queued turns are visible at once";
  }
  auto reopened = make_sqlite_store(path);
  auto turns = reopened->load("acme", "s1");
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(turns[0].assistant, "hello");
  EXPECT_EQ(turns[0].status, TurnStatus::completed);
  EXPECT_EQ(turns[1].status, TurnStatus::cancelled);
  EXPECT_EQ(reopened->load("globex", "s1").at(0).assistant, "other tenant");
  EXPECT_TRUE(reopened->load("acme", "nope").empty());
}

// The budget rules against the real tokenizer and chat template of a made-up model, whose
// byte-level vocabulary makes a Chinese character several tokens.
class Trim : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::ModelShape shape;
    shape.context = 4096;
    GgufModelConfig settings;
    settings.path = testing::temp_model(shape);
    settings.chat_template = "chatml";
    model_ = std::make_shared<GgufModel>(settings);
  }
  int64_t count(const std::vector<Message>& messages) const {
    Request probe;
    probe.messages = messages;
    return static_cast<int64_t>(model_->encode_prompt(probe, true).size());
  }
  TrimOutcome trim(const std::vector<Message>& messages, int64_t budget) const {
    return trim_to_budget(messages, budget, [this](const auto& m) { return count(m); });
  }
  std::shared_ptr<GgufModel> model_;
};

std::vector<Message> conversation() {
  return {{"system", "You are terse."},        {"user", "first question"},
          {"assistant", "first answer"},       {"user", "第二个问题是关于中文的"},
          {"assistant", "第二个回答也是中文"}, {"user", "third question"},
          {"assistant", "third answer"},       {"user", "the newest question"}};
}

std::vector<Message> keep(const std::vector<Message>& all, size_t turns) {
  // System, the newest `turns` pairs, the newest question: built by hand for the expectation.
  std::vector<Message> out = {all[0]};
  for (size_t i = 7 - 2 * turns; i < 7; ++i)
    out.push_back(all[i]);
  out.push_back(all[7]);
  return out;
}

TEST_F(Trim, KeepsWholeTurnsNewestFirstWithinTheBudget) {
  auto all = conversation();
  for (size_t turns = 0; turns <= 3; ++turns) {
    int64_t exact = count(keep(all, turns));
    // A budget of exactly what `turns` turns need keeps them; one token less keeps fewer.
    TrimOutcome fits = trim(all, exact);
    EXPECT_EQ(fits.turns_kept, turns);
    EXPECT_EQ(fits.messages.size(), keep(all, turns).size());
    EXPECT_EQ(fits.messages.front().role, "system");
    EXPECT_EQ(fits.messages.back().content, "the newest question");
    EXPECT_LE(fits.tokens, exact);
    if (turns > 0) {
      TrimOutcome short_of = trim(all, exact - 1);
      EXPECT_EQ(short_of.turns_kept, turns - 1) << "budget " << exact - 1;
    }
  }
}

TEST_F(Trim, CountsTokensNotCharacters) {
  std::string chinese = "第二个问题是关于中文的";
  std::vector<Message> one = {{"user", chinese}};
  // 11 characters, 3 bytes each, one token per byte in this vocabulary.
  EXPECT_GT(count(one), 30);
  auto all = conversation();
  // A budget that would hold the Chinese turn if characters were tokens does not.
  int64_t without = count(keep(all, 1));
  TrimOutcome outcome = trim(all, without + 25);
  EXPECT_EQ(outcome.turns_kept, 1u) << "the Chinese turn needs more than 25 tokens";
}

TEST_F(Trim, RefusesWhenTheNewestMessageAloneIsTooLong) {
  auto all = conversation();
  int64_t minimum = count(keep(all, 0));
  try {
    trim(all, minimum - 1);
    FAIL() << "no error";
  } catch (const RequestFailure& failure) {
    EXPECT_EQ(failure.error().status, 400);
    EXPECT_EQ(failure.error().code, "context_length_exceeded");
  }
}

}  // namespace
}  // namespace chatflow::history
