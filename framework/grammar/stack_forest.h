// The working form of matcher states: parse stacks as shared, hash-consed frames (a stack is a
// node: its top position and the node below), sets of stacks and "walk states" (a set plus the
// pending bytes of a code point) numbered, and every byte transition remembered. A mask walks a
// token trie through thousands of transitions that mostly repeat; one forest serves a whole walk.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "framework/grammar/grammar.h"

namespace chatflow::grammar {

class StackForest {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kFinished = -2;  // the empty stack: a complete sentence
  static constexpr int32_t kUnknown = -3;   // a step not yet taken

  // Throws GrammarLimitExceeded when a state would hold more than grammar.limits().max_stacks
  // stacks, or the forest would take more than max_work_bytes.
  explicit StackForest(const Grammar& grammar) : grammar_(grammar) {}

  int32_t initial();
  // A Matcher::state(); `clamp` (Grammar::clamped_positions) maps each position when given.
  int32_t import(std::span<const uint32_t> state, const std::vector<uint32_t>* clamp = nullptr);
  std::vector<uint32_t> export_state(int32_t walk) const;
  // The walk state after `byte`, or kDead.
  int32_t step(int32_t walk, uint8_t byte) {
    int32_t next = steps_[static_cast<size_t>(walk) * 256 + byte];
    if (next != kUnknown) return next;
    next = compute_step(walk, byte);
    steps_[static_cast<size_t>(walk) * 256 + byte] = next;
    return next;
  }

  size_t node_count() const { return nodes_.size(); }
  // The stacks of a walk state (a finished sentence counting as one).
  size_t stack_count(int32_t walk) const { return sets_[walks_[walk].set].size(); }
  // The code points the tops of a walk state's stacks accept, one per distinct character set
  // (the first of the set), at most `limit` of them; none while a code point is incomplete.
  std::vector<uint32_t> sample_next(int32_t walk, size_t limit) const;

 private:
  struct Frame {
    uint32_t position;
    int32_t below;  // -1: the bottom
  };
  struct WalkState {
    int32_t set;
    uint32_t pending;  // count << 24 | the bytes of an incomplete code point
  };
  struct VectorHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };

  int32_t frame(uint32_t position, int32_t below);
  int32_t set_of(std::vector<int32_t>& members);  // sorts and dedups `members`
  int32_t walk_of(int32_t set, uint32_t pending);
  int32_t close(std::vector<int32_t>& seeds);  // expands to tops on character sets
  int32_t advance_code_point(int32_t set, uint32_t code_point);
  bool any_top_intersects(int32_t set, uint32_t first, uint32_t last) const;
  int32_t compute_step(int32_t walk, uint8_t byte);

  // What the forest holds, roughly in bytes, against the grammar's max_work_bytes.
  void charge(size_t bytes);

  const Grammar& grammar_;
  size_t bytes_ = 0;
  std::vector<Frame> nodes_;
  std::unordered_map<uint64_t, int32_t> node_index_;
  std::vector<std::vector<int32_t>> sets_;
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> set_index_;
  std::vector<WalkState> walks_;
  std::unordered_map<uint64_t, int32_t> walk_index_;
  std::vector<int32_t> steps_;     // walk * 256 + byte -> the next walk, kDead, or kUnknown
  std::vector<uint32_t> visited_;  // node -> stamp of the last closure that expanded it
  uint32_t stamp_ = 0;
  std::vector<int32_t> work_;
  std::vector<int32_t> out_;
};

}  // namespace chatflow::grammar
