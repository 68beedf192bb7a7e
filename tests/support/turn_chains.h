// Checks for the concurrent-append tests of the history stores: threads each append a chain of
// turns (thread t's i-th question is "t<t>-<i>", answered under its (i-1)-th), and every turn
// must end up under the turn it was placed under.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/history/turn_tree.h"

namespace chatflow::testing {

// The question of thread `thread`'s `index`-th turn.
inline std::string chain_question(int thread, int index) {
  return "t" + std::to_string(thread) + "-" + std::to_string(index);
}

// How many of the `threads` × `turns_each` chained turns in `stored` sit under another parent
// than their chain's previous turn; fails the test when a question is missing or stored twice.
inline int misplaced_chain_turns(const std::vector<history::Turn>& stored, int threads,
                                 int turns_each) {
  EXPECT_EQ(stored.size(), static_cast<size_t>(threads * turns_each));
  history::TurnTree tree(stored);
  std::map<std::string, int64_t> id_of;
  for (size_t id = 1; id <= stored.size(); ++id)
    id_of[stored[id - 1].user] = static_cast<int64_t>(id);
  EXPECT_EQ(id_of.size(), stored.size()) << "every question stored once, as its own text";
  int wrong = 0;
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < turns_each; ++i) {
      auto found = id_of.find(chain_question(t, i));
      if (found == id_of.end()) {
        ADD_FAILURE() << chain_question(t, i) << " was not stored";
        continue;
      }
      int64_t expected = i == 0 ? 0 : id_of[chain_question(t, i - 1)];
      EXPECT_LT(tree.parent(found->second), found->second)
          << "a parent is written before its child";
      if (tree.parent(found->second) != expected) ++wrong;
    }
  }
  return wrong;
}

}  // namespace chatflow::testing
