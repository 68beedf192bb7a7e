// See turn_tree.h.
#include "framework/history/turn_tree.h"

#include <algorithm>

namespace chatflow::history {

TurnTree::TurnTree(const std::vector<Turn>& turns)
    : parent_(turns.size()), holder_(turns.size()), children_(turns.size() + 1) {
  for (size_t index = 0; index < turns.size(); ++index) {
    int64_t id = static_cast<int64_t>(index) + 1;
    const Turn& turn = turns[index];
    // A distance past the first kept turn: that turn expired; start at the root.
    int64_t parent = turn.parent_back > 0 && turn.parent_back < id ? id - turn.parent_back : 0;
    parent_[index] = parent;
    children_[static_cast<size_t>(parent)].push_back(id);
    int64_t holder = id;
    if (turn.question_back > 0 && turn.question_back < id)
      holder = holder_[static_cast<size_t>(id - turn.question_back - 1)];
    holder_[index] = holder;
  }
  if (!turns.empty()) {
    int64_t back = std::clamp<int64_t>(turns.back().active_back, 0, size() - 1);
    active_ = size() - back;
  }
}

std::vector<int64_t> TurnTree::path_to(int64_t id) const {
  std::vector<int64_t> path;
  for (int64_t at = id; at > 0; at = parent(at))
    path.push_back(at);
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<int64_t> TurnTree::shown_path() const {
  std::vector<int64_t> path = path_to(active_);
  int64_t at = active_;
  while (size() > 0 && !children(at).empty()) {
    at = children(at).back();
    path.push_back(at);
  }
  return path;
}

int64_t TurnTree::parent_for(int64_t parent) const {
  if (parent >= 0) return parent;
  std::vector<int64_t> shown = shown_path();
  return shown.empty() ? 0 : shown.back();
}

std::vector<Turn> with_questions(std::vector<Turn> turns, const TurnTree& tree) {
  for (int64_t id = 1; id <= tree.size(); ++id) {
    int64_t holder = tree.question_holder(id);
    if (holder != id)
      turns[static_cast<size_t>(id - 1)].user = turns[static_cast<size_t>(holder - 1)].user;
  }
  return turns;
}

void place_turn(Turn& turn, const std::vector<Turn>& stored, int64_t parent) {
  TurnTree tree(stored);
  int64_t id = tree.size() + 1;
  turn.parent_back = parent > 0 ? id - parent : 0;
  turn.question_back = 0;
  turn.active_back = 0;
  turn.placed_among = tree.size();
  for (int64_t sibling : tree.children(parent)) {
    int64_t holder = tree.question_holder(sibling);
    if (stored[static_cast<size_t>(holder - 1)].user != turn.user) continue;
    turn.question_back = id - holder;
    turn.user.clear();
    return;
  }
}

}  // namespace chatflow::history
