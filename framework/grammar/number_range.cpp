#include "framework/grammar/number_range.h"

#include <algorithm>
#include <string>
#include <vector>

namespace chatflow::grammar {
namespace {

using Expr = GrammarBuilder::Expr;

Expr digit(GrammarBuilder& b) {
  return b.chars({{'0', '9'}});
}

// Decimal strings of one length from `low` to `high` (both that length, low <= high).
Expr digits_between(GrammarBuilder& b, const std::string& low, const std::string& high) {
  if (low.empty()) return b.empty();
  if (low == high) return b.literal(low);
  size_t rest = low.size() - 1;
  bool low_rest_zeros = low.find_first_not_of('0', 1) == std::string::npos;
  bool high_rest_nines = high.find_first_not_of('9', 1) == std::string::npos;
  char32_t low_first = static_cast<unsigned char>(low[0]);
  char32_t high_first = static_cast<unsigned char>(high[0]);
  if (low_first == high_first)
    return b.sequence(
        {b.literal(low.substr(0, 1)), digits_between(b, low.substr(1), high.substr(1))});
  if (low_rest_zeros && high_rest_nines)
    return b.sequence({b.chars({{low_first, high_first}}), b.repeat(digit(b), rest, rest)});
  std::vector<Expr> alternatives;
  alternatives.push_back(b.sequence(
      {b.literal(low.substr(0, 1)), digits_between(b, low.substr(1), std::string(rest, '9'))}));
  if (high_first - low_first >= 2)
    alternatives.push_back(
        b.sequence({b.chars({{low_first + 1, high_first - 1}}), b.repeat(digit(b), rest, rest)}));
  alternatives.push_back(b.sequence(
      {b.literal(high.substr(0, 1)), digits_between(b, std::string(rest, '0'), high.substr(1))}));
  return b.choice(std::move(alternatives));
}

// Non-negative integers in [low, high], canonical.
Expr natural_range(GrammarBuilder& b, int64_t low, int64_t high) {
  std::vector<Expr> alternatives;
  int64_t length_start = 0;  // the smallest number of the current digit count
  int64_t length_end = 9;
  for (size_t length = 1; length <= kMaxIntegerDigits; ++length) {
    int64_t from = std::max(low, length_start);
    int64_t to = std::min(high, length_end);
    if (from <= to)
      alternatives.push_back(digits_between(b, std::to_string(from), std::to_string(to)));
    if (length_end >= high) break;
    length_start = length_end + 1;
    length_end = length_end * 10 + 9;
  }
  return b.choice(std::move(alternatives));
}

// A magnitude I.F (integer part I, optional fraction F) within optional integer bounds.
Expr magnitude(GrammarBuilder& b, std::optional<int64_t> low, bool low_exclusive,
               std::optional<int64_t> high, bool high_exclusive) {
  Expr any_fraction = b.repeat(b.sequence({b.literal("."), b.repeat(digit(b), 1, 16)}), 0, 1);
  Expr zero_fraction =
      b.repeat(b.sequence({b.literal("."), b.repeat(b.literal("0"), 1, 16)}), 0, 1);
  Expr nonzero_fraction = b.sequence({b.literal("."), b.repeat(b.literal("0"), 0, 7),
                                      b.chars({{'1', '9'}}), b.repeat(digit(b), 0, 8)});
  std::vector<Expr> alternatives;
  // Any fraction keeps I inside the bounds when low <= I (I > low if exclusive) and I < high.
  int64_t first = low ? (low_exclusive ? *low + 1 : *low) : 0;
  int64_t last = high ? *high - 1 : kMaxMagnitude;
  if (first <= last)
    alternatives.push_back(b.sequence({natural_range(b, first, last), any_fraction}));
  // I = low with a fraction above zero (exclusive low), I = high with none (inclusive high).
  if (low && low_exclusive && (!high || *low < *high))
    alternatives.push_back(b.sequence({b.literal(std::to_string(*low)), nonzero_fraction}));
  if (high && !high_exclusive && (!low || (low_exclusive ? *high > *low : *high >= *low)))
    alternatives.push_back(b.sequence({b.literal(std::to_string(*high)), zero_fraction}));
  return b.choice(std::move(alternatives));
}

}  // namespace

Expr integer_range(GrammarBuilder& b, int64_t min, int64_t max) {
  min = std::max(min, -kMaxMagnitude);
  max = std::min(max, kMaxMagnitude);
  std::vector<Expr> alternatives;
  if (min < 0)
    alternatives.push_back(
        b.sequence({b.literal("-"), natural_range(b, max < 0 ? -max : 1, -min)}));
  if (max >= 0) alternatives.push_back(natural_range(b, std::max<int64_t>(min, 0), max));
  if (min > max) return b.chars({});
  return b.choice(std::move(alternatives));
}

Expr bounded_number(GrammarBuilder& b, const NumberBounds& bounds) {
  std::vector<Expr> alternatives;
  // v >= 0, written without a sign: v = m.
  bool nonnegative_possible =
      !bounds.upper || *bounds.upper > 0 || (*bounds.upper == 0 && !bounds.upper_exclusive);
  if (nonnegative_possible) {
    std::optional<int64_t> low;
    bool low_exclusive = false;
    if (bounds.lower && (*bounds.lower > 0 || (*bounds.lower == 0 && bounds.lower_exclusive))) {
      low = bounds.lower;
      low_exclusive = bounds.lower_exclusive;
    }
    alternatives.push_back(magnitude(b, low, low_exclusive, bounds.upper, bounds.upper_exclusive));
  }
  // v < 0, written "-m": v >= a means m <= -a; v <= c (c < 0) means m >= -c.
  if (!bounds.lower || *bounds.lower < 0) {
    std::optional<int64_t> high;
    if (bounds.lower) high = -*bounds.lower;
    std::optional<int64_t> low = 0;
    bool low_exclusive = true;  // m > 0
    if (bounds.upper && *bounds.upper < 0) {
      low = -*bounds.upper;
      low_exclusive = bounds.upper_exclusive;
    }
    alternatives.push_back(b.sequence(
        {b.literal("-"), magnitude(b, low, low_exclusive, high, bounds.lower_exclusive)}));
  }
  return b.choice(std::move(alternatives));
}

}  // namespace chatflow::grammar
