// Numbers within bounds as regular languages over decimal text: the integers of [min, max]
// written as JSON writes them, and decimal numbers between integer bounds.
#pragma once

#include <cstdint>
#include <optional>

#include "framework/grammar/grammar.h"

namespace chatflow::grammar {

// The longest integer part (and fraction) a JSON number may have here, so that a model sampled
// at random cannot write digits forever.
inline constexpr int kMaxIntegerDigits = 16;
inline constexpr int64_t kMaxMagnitude = 9'999'999'999'999'999;  // 16 nines

// Integers in [min, max] (clipped to 16 digits), no leading zeros, no "-0".
GrammarBuilder::Expr integer_range(GrammarBuilder& builder, int64_t min, int64_t max);

struct NumberBounds {
  std::optional<int64_t> lower;
  bool lower_exclusive = false;
  std::optional<int64_t> upper;
  bool upper_exclusive = false;
};

// Decimal JSON numbers (an optional fraction, no exponent) within integer bounds, exactly.
GrammarBuilder::Expr bounded_number(GrammarBuilder& builder, const NumberBounds& bounds);

}  // namespace chatflow::grammar
