// The history_store resource's sessions as trees of turns: edits and regenerations kept as
// branches, the path a request continues, the path a session shows, switching it, old files.
#include "stages/history_store.h"

#include <atomic>
#include <thread>

#include <boost/json.hpp>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "framework/history/turn_tree.h"
#include "support/temp_model.h"
#include "support/turn_chains.h"

namespace chatflow {
namespace {

namespace json = boost::json;
using history::Turn;
using history::TurnStatus;

const history::SessionKey kSession{"acme", "user:u1", "s1"};

Turn answered(const std::string& question, const std::string& answer) {
  Turn turn;
  turn.user = question;
  turn.assistant = answer;
  turn.status = TurnStatus::completed;
  return turn;
}

std::vector<std::shared_ptr<HistoryStoreResource>> both_resources(const std::string& name) {
  return {std::make_shared<HistoryStoreResource>(history::make_memory_store()),
          std::make_shared<HistoryStoreResource>(
              history::make_sqlite_store(testing::fresh_path(name)))};
}

json::object session_of(HistoryStoreResource& resource, const std::string& owner = "user:u1") {
  auto text = resource.session_json("acme", owner, "s1");
  if (!text) return {};
  return json::parse(*text).as_object();
}

// The questions and answers of the path a session shows, "q>a" each.
std::vector<std::string> shown(HistoryStoreResource& resource) {
  std::vector<std::string> out;
  json::object session = session_of(resource);
  for (const auto& turn : session.at("turns").as_array()) {
    const auto& object = turn.as_object();
    out.push_back(std::string(object.at("user").as_string()) + ">" +
                  std::string(object.at("assistant").as_string()));
  }
  return out;
}

// Three turns, then turn 2 edited (a sibling with another question under turn 1) and turn 3
// regenerated twice (siblings under turn 2 with its question).
void write_branches(HistoryStoreResource& resource) {
  ASSERT_TRUE(resource.append_turn(kSession, answered("one", "1"), 0, true));
  ASSERT_TRUE(resource.append_turn(kSession, answered("two", "2"), 1, true));
  ASSERT_TRUE(resource.append_turn(kSession, answered("three", "3"), 2, true));
  ASSERT_TRUE(resource.append_turn(kSession, answered("two edited", "2b"), 1, true));  // 4
  ASSERT_TRUE(resource.append_turn(kSession, answered("three", "3b"), 2, false));      // 5
  ASSERT_TRUE(resource.append_turn(kSession, answered("three", "3c"), 2, true));       // 6
}

TEST(HistoryBranches, AnEditIsASiblingAndTheNewestBranchIsShown) {
  for (auto& resource : both_resources("branches-edit")) {
    ASSERT_TRUE(resource->append_turn(kSession, answered("one", "1"), 0, true));
    ASSERT_TRUE(resource->append_turn(kSession, answered("two", "2"), 1, true));
    ASSERT_TRUE(resource->append_turn(kSession, answered("two edited", "2b"), 1, true));
    EXPECT_EQ(shown(*resource), (std::vector<std::string>{"one>1", "two edited>2b"}));
    json::object session = session_of(*resource);
    EXPECT_EQ(session.at("active_turn").as_int64(), 3);
    const auto& edited = session.at("turns").as_array().at(1).as_object();
    EXPECT_EQ(edited.at("id").as_int64(), 3);
    EXPECT_EQ(edited.at("parent").as_int64(), 1);
    EXPECT_EQ(json::serialize(edited.at("siblings")), "[2,3]");
    EXPECT_EQ(edited.at("sibling_index").as_int64(), 1);
    const auto& first = session.at("turns").as_array().at(0).as_object();
    EXPECT_EQ(json::serialize(first.at("siblings")), "[1]");
    // The request after it continues the edited branch, not the one it replaced.
    auto context = resource->context(kSession);
    ASSERT_TRUE(context);
    EXPECT_EQ(context->parent, 3);
    ASSERT_EQ(context->turns.size(), 2u);
    EXPECT_EQ(context->turns[1].user, "two edited");
  }
}

TEST(HistoryBranches, ARegeneratedAnswerRefersToItsSiblingsQuestionInsteadOfACopy) {
  for (auto& resource : both_resources("branches-regenerate")) {
    write_branches(*resource);
    std::vector<Turn> stored = resource->store().load(kSession);
    ASSERT_EQ(stored.size(), 6u);
    EXPECT_EQ(stored[2].user, "three");
    EXPECT_EQ(stored[4].user, "") << "the regenerated turn stores no second copy";
    EXPECT_EQ(stored[5].user, "");
    EXPECT_EQ(stored[4].question_back, 2);
    EXPECT_EQ(stored[5].question_back, 3);
    EXPECT_EQ(stored[3].user, "two edited") << "an edited question is its own";
    // Where it is read, the question is there.
    auto context = resource->context(kSession, 5);
    ASSERT_TRUE(context);
    ASSERT_EQ(context->turns.size(), 3u);
    EXPECT_EQ(context->turns[2].user, "three");
    EXPECT_EQ(context->turns[2].assistant, "3b");
  }
}

TEST(HistoryBranches, AParentTurnGivesThePathToItAndAnUnknownOneIsRefused) {
  for (auto& resource : both_resources("branches-parent")) {
    write_branches(*resource);
    auto to_three = resource->context(kSession, 3);
    ASSERT_TRUE(to_three);
    ASSERT_EQ(to_three->turns.size(), 3u);
    EXPECT_EQ(to_three->turns[1].assistant, "2");
    EXPECT_EQ(to_three->turns[2].assistant, "3");
    auto root = resource->context(kSession, 0);
    ASSERT_TRUE(root);
    EXPECT_TRUE(root->turns.empty());
    EXPECT_EQ(root->parent, 0);
    EXPECT_FALSE(resource->context(kSession, 7)) << "there is no turn 7";
    EXPECT_FALSE(resource->context({"acme", "user:u2", "s1"}, 1))
        << "another owner's session of the same id has no turn 1";
  }
}

TEST(HistoryBranches, ShowingATurnSwitchesThePathAndANewTurnIsShownAgain) {
  for (auto& resource : both_resources("branches-show")) {
    write_branches(*resource);
    EXPECT_EQ(shown(*resource), (std::vector<std::string>{"one>1", "two>2", "three>3c"}));
    // Turn 4 (the edit) is the newest child of turn 1, but 6 was written last: shown.
    EXPECT_EQ(resource->show_turn("acme", "user:u1", "s1", 4), SessionBranches::Shown::shown);
    EXPECT_EQ(shown(*resource), (std::vector<std::string>{"one>1", "two edited>2b"}));
    EXPECT_EQ(session_of(*resource).at("active_turn").as_int64(), 4);
    // Showing turn 2 follows its newest child down.
    EXPECT_EQ(resource->show_turn("acme", "user:u1", "s1", 2), SessionBranches::Shown::shown);
    EXPECT_EQ(shown(*resource), (std::vector<std::string>{"one>1", "two>2", "three>3c"}));
    EXPECT_EQ(resource->show_turn("acme", "user:u1", "s1", 3), SessionBranches::Shown::shown);
    auto turns = session_of(*resource).at("turns").as_array();
    EXPECT_EQ(turns.at(2).at("sibling_index").as_int64(), 0);
    EXPECT_EQ(json::serialize(turns.at(2).at("siblings")), "[3,5,6]");
    // A request without parent_turn continues the shown path.
    EXPECT_EQ(resource->context(kSession)->parent, 3);
    ASSERT_TRUE(resource->append_turn(kSession, answered("four", "4"), 3, true));
    EXPECT_EQ(shown(*resource), (std::vector<std::string>{"one>1", "two>2", "three>3", "four>4"}));
    EXPECT_EQ(resource->show_turn("acme", "user:u1", "s1", 8), SessionBranches::Shown::no_turn);
    EXPECT_EQ(resource->show_turn("acme", "user:u1", "s1", 0), SessionBranches::Shown::no_turn);
    EXPECT_EQ(resource->show_turn("acme", "user:u2", "s1", 1), SessionBranches::Shown::no_session)
        << "another owner's session is none";
    EXPECT_EQ(resource->show_turn("acme", "user:u1", "s2", 1), SessionBranches::Shown::no_session);
  }
}

TEST(HistoryBranches, BranchesAndTheShownTurnSurviveReopeningTheFile) {
  std::string path = testing::fresh_path("branches-reopen");
  {
    HistoryStoreResource resource(history::make_sqlite_store(path));
    write_branches(resource);
    ASSERT_EQ(resource.show_turn("acme", "user:u1", "s1", 5), SessionBranches::Shown::shown);
  }
  HistoryStoreResource reopened(history::make_sqlite_store(path));
  EXPECT_EQ(shown(reopened), (std::vector<std::string>{"one>1", "two>2", "three>3b"}));
  auto turns = session_of(reopened).at("turns").as_array();
  EXPECT_EQ(turns.at(2).at("sibling_index").as_int64(), 1);
}

TEST(HistoryBranches, AFileFromBeforeBranchesReadsAsAChainAndTakesBranches) {
  std::string path = testing::fresh_path("branches-v3");
  {
    sqlite3* database = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &database), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(database,
                           "CREATE TABLE turns (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, "
                           "owner TEXT NOT NULL DEFAULT '', session TEXT NOT NULL, time INTEGER "
                           "NOT NULL, user TEXT NOT NULL, assistant TEXT NOT NULL, status TEXT "
                           "NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER "
                           "NOT NULL);"
                           "INSERT INTO turns (tenant, owner, session, time, user, assistant, "
                           "status, prompt_tokens, completion_tokens) VALUES "
                           "('acme', 'user:u1', 's1', 5, 'old one', 'a1', 'completed', 1, 1),"
                           "('acme', 'user:u1', 's1', 6, 'old two', 'a2', 'completed', 1, 1),"
                           "('acme', 'user:u1', 's1', 7, 'old three', 'a3', 'completed', 1, 1);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(database);
  }
  HistoryStoreResource resource(history::make_sqlite_store(path));
  EXPECT_EQ(shown(resource),
            (std::vector<std::string>{"old one>a1", "old two>a2", "old three>a3"}));
  auto turns = session_of(resource).at("turns").as_array();
  EXPECT_EQ(turns.at(2).at("parent").as_int64(), 2);
  EXPECT_EQ(resource.context(kSession)->parent, 3);
  ASSERT_TRUE(resource.append_turn(kSession, answered("old two", "a2 again"), 1, true));
  EXPECT_EQ(shown(resource), (std::vector<std::string>{"old one>a1", "old two>a2 again"}));
  EXPECT_EQ(resource.store().load(kSession).at(3).user, "") << "the old question is referred to";
}

TEST(HistoryBranches, ATurnWhoseParentExpiredStartsAtTheRoot) {
  // Turns 1..2 gone (retention): turn 3's parent (2) is not among what is left.
  std::vector<Turn> kept;
  Turn three = answered("three", "3");
  three.parent_back = 1;
  Turn four = answered("four", "4");
  four.parent_back = 3;  // turn 1, expired
  kept.push_back(three);
  kept.push_back(four);
  history::TurnTree tree(kept);
  EXPECT_EQ(tree.parent(1), 0);
  EXPECT_EQ(tree.parent(2), 0);
  EXPECT_EQ(tree.children(0), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(tree.shown_path(), (std::vector<int64_t>{2}));
}

// Answers of one session finishing at once (two tabs): each thread writes a chain of its own,
// every turn under the thread's previous one. A turn placed by a count of turns another thread
// changed meanwhile would hang under the wrong parent.
TEST(HistoryBranches, TurnsAppendedAtOnceInOneSessionKeepTheirParents) {
  constexpr int kThreads = 8;
  constexpr int kTurnsEach = 30;
  for (auto& resource : both_resources("branches-concurrent")) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&resource, t] {
        int64_t parent = 0;
        for (int i = 0; i < kTurnsEach; ++i) {
          std::string question = testing::chain_question(t, i);
          resource->append_turn(kSession, answered(question, "a"), parent, i % 2 == 0);
          // The thread's own turn, found by its question: the next one's parent.
          auto stored = resource->store().load(kSession);
          parent = 0;
          for (size_t id = stored.size(); id >= 1 && parent == 0; --id)
            if (stored[id - 1].user == question) parent = static_cast<int64_t>(id);
        }
      });
    }
    for (auto& thread : threads)
      thread.join();
    EXPECT_EQ(
        testing::misplaced_chain_turns(resource->store().load(kSession), kThreads, kTurnsEach), 0)
        << "turns under another parent than the one they were written under";
  }
}

// A failing store under an import: the memory store, failing its third append.
class FailingThirdAppend final : public history::HistoryStore {
 public:
  std::vector<Turn> load(const history::SessionKey& key) override { return inner_->load(key); }
  bool append(const history::SessionKey& key, Turn turn, bool durable) override {
    if (++appends_ == 3) return false;
    return inner_->append(key, std::move(turn), durable);
  }
  std::optional<history::SessionPage> list(const std::string& tenant, const std::string& owner,
                                           size_t limit, const std::string& after) override {
    return inner_->list(tenant, owner, limit, after);
  }
  std::optional<history::SessionSummary> summary(const history::SessionKey& key) override {
    return inner_->summary(key);
  }
  bool remove(const history::SessionKey& key) override { return inner_->remove(key); }
  std::optional<history::SessionSummary> rename(const history::SessionKey& key,
                                                const std::string& title) override {
    return inner_->rename(key, title);
  }
  std::vector<Turn> load_recent(const history::SessionKey& key, size_t max_turns) override {
    return inner_->load_recent(key, max_turns);
  }
  std::vector<std::string> remove_owner(const std::string& tenant,
                                        const std::string& owner) override {
    return inner_->remove_owner(tenant, owner);
  }
  history::SweepOutcome sweep(int64_t now) override { return inner_->sweep(now); }

 private:
  std::unique_ptr<history::HistoryStore> inner_ = history::make_memory_store();
  int appends_ = 0;
};

TEST(SessionImportStore, AnImportTheStoreCouldNotFinishLeavesNoTurnAndCanBeRetried) {
  HistoryStoreResource resource(std::make_unique<FailingThirdAppend>());
  std::vector<ImportedTurn> turns{{"one", "1"}, {"two", "2"}, {"three", "3"}, {"four", "4"}};
  EXPECT_THROW(resource.import_session("acme", "user:u1", "s1", turns, "t"), std::runtime_error);
  EXPECT_TRUE(resource.store().load(kSession).empty()) << "turns 1 and 2 removed again";
  auto retried = resource.import_session("acme", "user:u1", "s1", turns, "t");
  ASSERT_TRUE(retried) << "the retry is not refused as an existing session";
  EXPECT_EQ(retried->turns, 4);
  EXPECT_EQ(resource.store().load(kSession).at(3).user, "four");
}

TEST(SessionImportStore, ImportsOfOneIdAtOnceWriteOneSessionAndRefuseTheOthers) {
  constexpr int kImports = 16;
  constexpr int kTurns = 40;
  for (auto& resource : both_resources("import-concurrent")) {
    std::atomic<int> written = 0;
    std::atomic<int> refused = 0;
    std::atomic<bool> go = false;  // every import starts at once
    std::vector<std::thread> threads;
    for (int t = 0; t < kImports; ++t) {
      threads.emplace_back([&, t] {
        std::vector<ImportedTurn> turns;
        for (int i = 0; i < kTurns; ++i)
          turns.push_back({"import" + std::to_string(t), std::to_string(i)});
        while (!go)
          std::this_thread::yield();
        auto info = resource->import_session("acme", "user:u1", "s1", turns, "");
        ++(info ? written : refused);
      });
    }
    go = true;
    for (auto& thread : threads)
      thread.join();
    EXPECT_EQ(written, 1);
    EXPECT_EQ(refused, kImports - 1);
    std::vector<Turn> stored = resource->store().load(kSession);
    ASSERT_EQ(stored.size(), static_cast<size_t>(kTurns))
        << "one import's turns, no other's among them";
    for (const auto& turn : stored)
      EXPECT_EQ(turn.user, stored.front().user) << "every turn from the same import";
  }
}

}  // namespace
}  // namespace chatflow
