// A grammar as a token constraint: the masks of one grammar over one model's vocabulary, shared
// by every sequence that follows it (computed once per grammar state, framework/grammar/), and
// each sequence's place in the grammar. A grammar can wait for a trigger: the sequence is free
// until the trigger text appears, and follows the grammar from there (a tool call that opens in
// an answer that may also be text); a token that would complete the trigger with bytes the
// grammar refuses is never chosen. A reasoning model's thinking block comes before the grammar.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framework/engine/token_constraint.h"
#include "framework/engine/tokenizer.h"
#include "framework/grammar/token_masker.h"

namespace chatflow::engine {

// The bytes each token writes; control and unknown tokens none (a grammar never allows them).
std::shared_ptr<const grammar::TokenTable> token_table_of(const Tokenizer& tokenizer);

// What one sequence may spend on its grammar's token masks: computed off the engine thread
// (TokenConstraint::prepare), they still take a core, so a schema whose masks are slow fails its
// own request instead of running on after it should have ended. The grammar's GrammarLimits
// bound the memory and the readings of each computation.
struct MaskBudget {
  std::chrono::milliseconds per_sequence{10'000};  // mask computation, all of a sequence's
};

class GrammarMasks : public std::enable_shared_from_this<GrammarMasks> {
 public:
  GrammarMasks(std::shared_ptr<const grammar::Grammar> grammar,
               std::shared_ptr<const grammar::TokenTable> tokens,
               std::vector<TokenId> end_of_generation, MaskBudget budget = {});

  enum class Reasoning {
    none,     // the text is the grammar's (or the trigger's) from its start
    open,     // the prompt opened a thinking block: the grammar starts after "</think>"
    optional  // the text may open one with "<think>"; the grammar starts after its end
  };
  struct Trigger {
    std::string text;       // empty: the grammar holds from the first token (after reasoning)
    bool at_start = false;  // only at the start of the text (after spaces)
    Reasoning reasoning = Reasoning::none;
  };
  // A constraint for one new sequence (it keeps these masks alive).
  std::shared_ptr<TokenConstraint> start(Trigger trigger) const;

 private:
  friend class GrammarConstraint;
  // Tokens that, after `matched` bytes of the trigger, would complete it with what follows in
  // the token refused by the grammar (bit set: forbidden). Computed once per trigger state.
  std::shared_ptr<const std::vector<uint64_t>> trigger_forbidden(const Trigger& trigger,
                                                                 size_t matched) const;
  // Tokens that continue "<think>" after `matched` of its bytes (spaces before it allowed while
  // none is matched): what else may open a text whose grammar holds from the start but which may
  // first think.
  std::shared_ptr<const std::vector<uint64_t>> think_openers(size_t matched) const;

  std::shared_ptr<const grammar::Grammar> grammar_;
  std::shared_ptr<const grammar::TokenTable> tokens_;
  std::vector<TokenId> end_of_generation_;
  MaskBudget budget_;
  mutable grammar::TokenMasker masker_;
  mutable std::mutex mutex_;  // the lazily computed masks below
  mutable std::map<std::pair<std::string, size_t>, std::shared_ptr<const std::vector<uint64_t>>>
      trigger_masks_;
  mutable std::map<size_t, std::shared_ptr<const std::vector<uint64_t>>> think_masks_;
};

}  // namespace chatflow::engine
