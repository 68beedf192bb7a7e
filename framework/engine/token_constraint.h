// What a sequence may generate next, beyond what the model prefers: the sampler sees only the
// tokens a constraint (a grammar, framework/engine/grammar_constraint.h) lets through, and the
// sequence ends when the constraint says the text is complete. One object per sequence, used on
// the engine thread only, except for the work prepare() hands out, which runs elsewhere.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -infinity (end-of-generation tokens
  // included, until the text may end).
  virtual void restrict(std::span<float> logits) = 0;
  // What restrict() lets through, as a bitset over a vocabulary of `vocabulary` tokens (bit
  // id % 64 of word id / 64 set: allowed), the form a constraint crosses to a backend in
  // (TokenDraw::allowed, backend.h). Applying it to logits is restrict() exactly.
  virtual void allowed(int64_t vocabulary, std::vector<uint64_t>& mask) {
    std::vector<float> logits(static_cast<size_t>(vocabulary), 0.0f);
    restrict(logits);
    mask.assign(static_cast<size_t>((vocabulary + 63) / 64), 0);
    for (size_t id = 0; id < logits.size(); ++id) {
      if (logits[id] != -std::numeric_limits<float>::infinity())
        mask[id / 64] |= uint64_t{1} << (id % 64);
    }
  }
  // The token that was sampled (never an end-of-generation token).
  virtual void accept(TokenId token) = 0;
  // Nothing may follow what was generated: the sequence ends as at end of generation.
  virtual bool complete() const = 0;
  // The constraint holds the text now (not waiting for a trigger): an end-of-generation token it
  // lets through ends the sequence even under ignore_eos, since the text is complete.
  virtual bool engaged() const = 0;

  // Work restrict() needs done first that may be slow (a token mask never computed before), to
  // run off the engine thread so that one sequence's mask never holds up the others' steps; an
  // empty function when restrict() is ready now. The scheduler runs it on a worker and calls
  // prepare() again once it has returned (the constraint takes the result then), never
  // restrict() or accept() while it runs.
  virtual std::function<void()> prepare() { return {}; }
  // Why the sequence cannot go on (a budget of the constraint's spent), or "" while it can:
  // the scheduler fails the sequence with this message.
  virtual std::string failure() const { return {}; }
  // The sequence is gone (cancelled, finished, failed): work prepare() handed out stops at its
  // next check. Called on the engine thread, possibly while that work runs.
  virtual void abandon() {}
};

}  // namespace chatflow::engine
