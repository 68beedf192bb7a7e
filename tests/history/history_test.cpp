#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "framework/history/history_store.h"
#include "framework/history/trim.h"
#include "stages/gguf_model.h"
#include "support/temp_model.h"

namespace chatflow::history {
namespace {

SessionKey key(const std::string& tenant, const std::string& session,
               const std::string& owner = "user:u1") {
  return {tenant, owner, session};
}

TEST(HistoryStore, SqliteKeepsTurnsAcrossReopening) {
  std::string path = testing::fresh_path("history");
  {
    auto store = make_sqlite_store(path);
    EXPECT_TRUE(
        store->append(key("acme", "s1"), {"hi", "hello", TurnStatus::completed, 3, 4, 0}, true));
    store->append(key("acme", "s1"), {"and?", "", TurnStatus::cancelled, 5, 0, 0}, false);
    store->append(key("acme", "s2"), {"other", "session", TurnStatus::completed, 1, 1, 0}, false);
    store->append(key("globex", "s1"), {"same id", "other tenant", TurnStatus::completed, 1, 1, 0},
                  true);
    EXPECT_EQ(store->load(key("acme", "s1")).size(), 2u) << "queued turns are visible at once";
  }
  auto reopened = make_sqlite_store(path);
  auto turns = reopened->load(key("acme", "s1"));
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(turns[0].assistant, "hello");
  EXPECT_EQ(turns[0].status, TurnStatus::completed);
  EXPECT_EQ(turns[1].status, TurnStatus::cancelled);
  EXPECT_EQ(reopened->load(key("globex", "s1")).at(0).assistant, "other tenant");
  EXPECT_TRUE(reopened->load(key("acme", "nope")).empty());
}

TEST(HistoryStore, AnotherOwnersSessionOfTheSameIdIsAnotherSession) {
  std::vector<std::unique_ptr<HistoryStore>> stores;
  stores.push_back(make_memory_store());
  stores.push_back(make_sqlite_store(testing::fresh_path("owners")));
  for (auto& store : stores) {
    store->append(key("acme", "s1", "user:u1"), {"mine", "yes", TurnStatus::completed, 1, 1, 0},
                  true);
    store->append(key("acme", "s1", "key:k2"), {"theirs", "no", TurnStatus::completed, 1, 1, 0},
                  true);
    auto mine = store->load(key("acme", "s1", "user:u1"));
    ASSERT_EQ(mine.size(), 1u);
    EXPECT_EQ(mine[0].user, "mine");
    EXPECT_EQ(store->load(key("acme", "s1", "key:k2")).at(0).user, "theirs");
    EXPECT_TRUE(store->load(key("acme", "s1", "user:u2")).empty());
    EXPECT_TRUE(store->load(key("acme", "s1", "")).empty());
  }
}

TEST(HistoryStore, AFileFromBeforeOwnersIsMigratedAndItsTurnsBelongToNobody) {
  std::string path = testing::fresh_path("history-v1");
  {
    sqlite3* database = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &database), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(database,
                           "CREATE TABLE turns (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, "
                           "session TEXT NOT NULL, time INTEGER NOT NULL, user TEXT NOT NULL, "
                           "assistant TEXT NOT NULL, status TEXT NOT NULL, prompt_tokens INTEGER "
                           "NOT NULL, completion_tokens INTEGER NOT NULL);"
                           "INSERT INTO turns (tenant, session, time, user, assistant, status, "
                           "prompt_tokens, completion_tokens) VALUES "
                           "('acme', 's1', 1, 'old', 'turn', 'completed', 1, 1);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(database);
  }
  auto store = make_sqlite_store(path);
  EXPECT_TRUE(store->load(key("acme", "s1")).empty()) << "nobody reads an unowned turn as theirs";
  EXPECT_EQ(store->load(key("acme", "s1", "")).at(0).user, "old");
  EXPECT_TRUE(
      store->append(key("acme", "s1"), {"new", "turn", TurnStatus::completed, 1, 1, 0}, true));
  EXPECT_EQ(store->load(key("acme", "s1")).at(0).user, "new");
}

TEST(HistoryStore, ADamagedFileIsRefusedAtOpenNamingItsPath) {
  std::string path = testing::fresh_path("history-damaged");
  {
    auto store = make_sqlite_store(path);
    for (int i = 0; i < 200; ++i) {
      store->append(key("acme", "s" + std::to_string(i)),
                    {std::string(500, 'q'), std::string(500, 'a'), TurnStatus::completed, 1, 1, 0},
                    false);
    }
  }
  {
    // Overwrite pages in the middle of the file (after its header page) with noise.
    std::FILE* file = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(file, nullptr);
    std::fseek(file, 4096 * 3, SEEK_SET);
    std::string noise(4096 * 4, '\x5a');
    std::fwrite(noise.data(), 1, noise.size(), file);
    std::fclose(file);
  }
  try {
    make_sqlite_store(path);
    FAIL() << "a damaged history file was opened";
  } catch (const std::runtime_error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("damaged"), std::string::npos) << message;
  }
}

// A write that fails after the store opened (here: the file may not grow past its size, as on
// a full disk) is reported to a durable append and counted, never silently dropped.
TEST(HistoryStore, AFailedWriteIsReportedToTheDurableAppendAndCounted) {
  std::string path = testing::fresh_path("history-full");
  auto store = make_sqlite_store(path);
  ASSERT_TRUE(
      store->append(key("acme", "s1"), {"small", "turn", TurnStatus::completed, 1, 1, 0}, true));
  EXPECT_EQ(store->lost_turns(), 0);
  std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit capped = before;
  capped.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &capped), 0);
  bool saved = store->append(
      key("acme", "s1"), {std::string(1 << 20, 'x'), "big", TurnStatus::completed, 1, 1, 0}, true);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &before), 0);
  EXPECT_FALSE(saved);
  EXPECT_EQ(store->lost_turns(), 1);
  EXPECT_GT(store->last_failure_time(), 0);
  EXPECT_EQ(store->load(key("acme", "s1")).size(), 1u) << "the failed turn is not given back";
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
