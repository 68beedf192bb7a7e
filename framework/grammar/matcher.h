// Where a text stands in a grammar: the set of parse stacks (llama.cpp-style pushdown, every
// ambiguous reading kept at once) plus the bytes of a code point not yet complete, so that text
// can arrive in arbitrary byte chunks (a token may end inside a multi-byte character).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "framework/grammar/grammar.h"

namespace chatflow::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // All or nothing: false (the bytes cannot continue any sentence) leaves the state unchanged.
  bool advance(std::string_view bytes);
  // The text so far is a complete sentence of the grammar.
  bool accepting() const;
  // At least one more byte is possible.
  bool can_continue() const;

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }

  // The state as numbers: the stack count, then each stack as its length and its positions
  // (bottom first; a top is always a character set; an empty stack is a finished sentence),
  // stacks in a canonical order, then the pending bytes of an incomplete code point packed as
  // (count << 24 | bytes). Equal states match the same continuations.
  const std::vector<uint32_t>& state() const { return state_; }
  bool operator==(const Matcher& other) const { return state_ == other.state_; }
  size_t hash() const;

 private:
  friend class StackForest;
  std::shared_ptr<const Grammar> grammar_;
  std::vector<uint32_t> state_;
};

}  // namespace chatflow::grammar

template <>
struct std::hash<chatflow::grammar::Matcher> {
  size_t operator()(const chatflow::grammar::Matcher& matcher) const { return matcher.hash(); }
};
