// A session's turns as a tree: editing a sent message or regenerating an answer adds a turn
// beside the one it replaces (a sibling, under the same parent) instead of changing it, so every
// branch stays. Turns are numbered 1..n in the order they were written (the store's order); 0
// is the root, the empty conversation before the first message. Each turn keeps where its
// parent and its question are as distances back (Turn::parent_back, question_back), which stay
// right when retention removes a session's oldest turns; a turn whose parent expired starts at
// the root. The session shows one path at a time: from the root to its active turn (the newest
// turn's active_back says which), then on down through the newest child at each step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/history/history_store.h"

namespace chatflow::history {

class TurnTree {
 public:
  explicit TurnTree(const std::vector<Turn>& turns);

  int64_t size() const { return static_cast<int64_t>(parent_.size()); }
  bool has(int64_t id) const { return id >= 1 && id <= size(); }
  // The turn's parent, 0 for a first message. `id` must exist.
  int64_t parent(int64_t id) const { return parent_[static_cast<size_t>(id - 1)]; }
  // The turn that holds the text of `id`'s question (itself unless it was regenerated).
  int64_t question_holder(int64_t id) const { return holder_[static_cast<size_t>(id - 1)]; }
  // The turns answering under `id` (0: the first messages), oldest first.
  const std::vector<int64_t>& children(int64_t id) const {
    return children_[static_cast<size_t>(id)];
  }
  // From the first message down to `id` (empty for 0).
  std::vector<int64_t> path_to(int64_t id) const;
  // The turn the session shows (0 when there is none).
  int64_t active() const { return active_; }
  // The path shown: to the active turn, then its newest child at each step.
  std::vector<int64_t> shown_path() const;
  // Where a new turn goes: `parent`, or the end of the shown path when `parent` is absent (-1).
  int64_t parent_for(int64_t parent) const;

 private:
  std::vector<int64_t> parent_;
  std::vector<int64_t> holder_;
  std::vector<std::vector<int64_t>> children_;  // by id, 0 first
  int64_t active_ = 0;
};

// The turns with every question's text filled in (a regenerated turn stores none of its own).
std::vector<Turn> with_questions(std::vector<Turn> turns, const TurnTree& tree);

// The new turn `turn` (its own question in `user`) placed under `parent` of the session `stored`:
// sets parent_back, and when a sibling asked the same question, question_back instead of a
// second copy of the text (`user` is then left empty).
void place_turn(Turn& turn, const std::vector<Turn>& stored, int64_t parent);

}  // namespace chatflow::history
