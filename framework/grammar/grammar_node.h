// The expression tree a GrammarBuilder records before build() lowers it into rules.
#pragma once

#include <string>
#include <vector>

#include "framework/grammar/grammar.h"

namespace chatflow::grammar {

struct GrammarBuilder::Node {
  enum class Kind { empty, literal, chars, sequence, choice, repeat, rule };
  Kind kind = Kind::empty;
  std::u32string text;                 // literal
  std::vector<CodepointRange> ranges;  // chars: sorted, disjoint, valid code points only
  std::vector<int32_t> children;  // sequence, choice, repeat (one), rule (its body, once defined)
  int min = 0;
  int max = 0;
};

// Sorted, merged, and (when `negated`) complemented over the valid code points (surrogates
// excluded).
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negated);

}  // namespace chatflow::grammar
