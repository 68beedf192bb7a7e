// A grammar as a token constraint: the masks of one grammar over one model's vocabulary, shared
// by every sequence that follows it (computed once per grammar state, framework/grammar/), and
// each sequence's place in the grammar. A grammar can wait for a trigger: the sequence is free
// until one of the trigger texts appears, and follows the grammar from there (a tool call that
// opens in an answer that may also be text).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/engine/token_constraint.h"
#include "framework/engine/tokenizer.h"
#include "framework/grammar/token_masker.h"

namespace chatflow::engine {

// The bytes each token writes; control and unknown tokens none (a grammar never allows them).
std::shared_ptr<const grammar::TokenTable> token_table_of(const Tokenizer& tokenizer);

class GrammarMasks : public std::enable_shared_from_this<GrammarMasks> {
 public:
  GrammarMasks(std::shared_ptr<const grammar::Grammar> grammar,
               std::shared_ptr<const grammar::TokenTable> tokens,
               std::vector<TokenId> end_of_generation);

  struct Trigger {
    std::vector<std::string> texts;  // empty: the grammar holds from the first token
    bool at_start = false;           // only at the start of the text (after spaces)
  };
  // A constraint for one new sequence (it keeps these masks alive).
  std::shared_ptr<TokenConstraint> start(Trigger trigger) const;

 private:
  friend class GrammarConstraint;
  std::shared_ptr<const grammar::Grammar> grammar_;
  std::shared_ptr<const grammar::TokenTable> tokens_;
  std::vector<TokenId> end_of_generation_;
  mutable grammar::TokenMasker masker_;
};

}  // namespace chatflow::engine
