// What a sequence may generate next, beyond what the model prefers: the sampler sees only the
// tokens a constraint (a grammar, framework/engine/grammar_constraint.h) lets through, and the
// sequence ends when the constraint says the text is complete. One object per sequence, used on
// the engine thread only.
#pragma once

#include <span>

#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -infinity (end-of-generation tokens
  // included, until the text may end).
  virtual void restrict(std::span<float> logits) = 0;
  // The token that was sampled (never an end-of-generation token).
  virtual void accept(TokenId token) = 0;
  // Nothing may follow what was generated: the sequence ends as at end of generation.
  virtual bool complete() const = 0;
  // The constraint holds the text now (not waiting for a trigger): an end-of-generation token it
  // lets through ends the sequence even under ignore_eos, since the text is complete.
  virtual bool engaged() const = 0;
};

}  // namespace chatflow::engine
