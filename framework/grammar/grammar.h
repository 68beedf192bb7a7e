// Context-free grammars over Unicode code points, for constrained decoding. A GrammarBuilder
// composes expressions (literals, sequences, choices, repeats, character sets, JSON Schemas,
// regular expressions) and lowers them into a Grammar: rules of alternatives of symbols, laid
// out flat so that a parse position is one integer. A Grammar is immutable once built and is
// shared as std::shared_ptr<const Grammar> by every Matcher and TokenMasker over it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

namespace chatflow::grammar {

// A schema keyword or regex construct that cannot be enforced: `keyword` names it ("pattern",
// "format", "minimum", "$ref", "not", ...) and `pointer` is its JSON pointer in the schema
// ("/properties/age/minimum"; "" for the whole schema or a bare regex).
class SchemaError : public std::runtime_error {
 public:
  SchemaError(std::string keyword, std::string pointer, std::string message);
  const std::string& keyword() const { return keyword_; }
  const std::string& pointer() const { return pointer_; }
  const std::string& detail() const { return detail_; }  // the message without keyword and pointer

 private:
  std::string keyword_;
  std::string pointer_;
  std::string detail_;
};

// What one grammar may cost, so that one request's schema cannot take the engine's memory or
// time: its size when built (GrammarBuilder::build), the parse stacks one state of it may hold
// (each a reading of the text so far that is still alive: overlapping anyOf branches and
// unanchored patterns with long repeats multiply them), and the working memory of computing one
// state's successors or token mask.
struct GrammarLimits {
  size_t max_symbols = 1'000'000;
  size_t max_stacks = 4096;
  size_t max_work_bytes = size_t{64} << 20;
};

// The grammar is larger or more ambiguous than its GrammarLimits allow, or work on it ran past
// its WorkBudget's deadline. The message says which limit and what it was.
class GrammarLimitExceeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Work on a grammar stopped because its WorkBudget was cancelled (whoever wanted it left).
class GrammarWorkCancelled : public std::runtime_error {
 public:
  GrammarWorkCancelled() : std::runtime_error("grammar work cancelled") {}
};

// When long work on a grammar (a token mask) gives up: past `deadline` (GrammarLimitExceeded),
// or once `*cancelled` is set from another thread (GrammarWorkCancelled). Checked every few
// hundred steps of the work.
struct WorkBudget {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  const std::atomic<bool>* cancelled = nullptr;
  void check() const;
};

// Code points first..last, inclusive.
struct CodepointRange {
  uint32_t first;
  uint32_t last;
  auto operator<=>(const CodepointRange&) const = default;
};

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

class Grammar {
 public:
  enum class SymbolKind : uint8_t { charset, rule, end };
  struct Symbol {
    SymbolKind kind;
    uint32_t value;  // charset index (charset) or rule index (rule)
  };

  // Every alternative of every rule, each ending with an `end` symbol; a parse position is an
  // index into this array.
  std::span<const Symbol> symbols() const { return symbols_; }
  // The positions where rule `rule`'s alternatives start.
  std::span<const uint32_t> alternatives(uint32_t rule) const {
    return {alternative_starts_.data() + rule_alternatives_[rule],
            alternative_starts_.data() + rule_alternatives_[rule + 1]};
  }
  uint32_t root() const { return root_; }
  size_t rule_count() const { return rule_alternatives_.size() - 1; }
  const GrammarLimits& limits() const { return limits_; }

  bool charset_contains(uint32_t charset, uint32_t code_point) const;
  bool charset_intersects(uint32_t charset, uint32_t first, uint32_t last) const;

  // Positions mapped to equivalent ones for any continuation of at most `budget` code points:
  // the levels of a bounded repeat deeper than `budget` behave as level `budget` does, so a
  // mask cache can share them (a string of maxLength 500 has 500 states, all alike for a token).
  std::vector<uint32_t> clamped_positions(size_t budget) const;

 private:
  friend class GrammarBuilder;

  std::vector<Symbol> symbols_;
  std::vector<uint32_t> alternative_starts_;
  std::vector<uint32_t> rule_alternatives_;  // rule -> first index in alternative_starts_
  std::vector<uint32_t> charset_offsets_;    // charset -> first index in charset_ranges_
  std::vector<CodepointRange> charset_ranges_;
  std::vector<uint8_t> charset_ascii_;  // charset * 128 + c: c is in the charset
  // Bounded repeats: the rules of each level, innermost (one item left) first.
  std::vector<std::vector<uint32_t>> repeat_levels_;
  std::vector<std::pair<uint32_t, uint32_t>> rule_spans_;  // rule -> its symbols [first, last)
  uint32_t root_ = 0;
  GrammarLimits limits_;
};

class GrammarBuilder {
 public:
  // An expression of this builder (meaningless in another one).
  struct Expr {
    int32_t id = -1;
  };

  GrammarBuilder();
  ~GrammarBuilder();
  GrammarBuilder(const GrammarBuilder&) = delete;
  GrammarBuilder& operator=(const GrammarBuilder&) = delete;

  Expr empty();
  Expr literal(std::string_view utf8);
  // Code points in `ranges` (or, `negated`, every valid code point outside them). No range at
  // all matches nothing.
  Expr chars(std::vector<CodepointRange> ranges, bool negated = false);
  Expr sequence(std::vector<Expr> items);
  Expr choice(std::vector<Expr> alternatives);
  Expr repeat(Expr item, int min, int max);  // max = -1: unbounded
  // A named rule declared before its body, so expressions can refer to themselves.
  Expr rule();
  void define(Expr rule, Expr body);

  Expr json_schema(const boost::json::value& schema);  // throws SchemaError
  Expr any_json_object();                              // for response_format json_object
  Expr any_json_value();
  Expr regex(std::string_view pattern);  // the whole text matches; throws SchemaError (pointer "")

  // Throws std::invalid_argument when the grammar is left-recursive (a rule reaches itself
  // without consuming input) or accepts no sentence at all, and GrammarLimitExceeded when it
  // would need more than limits.max_symbols symbols. Every state of the grammar is held to
  // `limits` from then on.
  std::shared_ptr<const Grammar> build(Expr root, const GrammarLimits& limits = {});

  struct Node;

 private:
  friend class JsonGrammar;
  Expr add(Node node);

  std::vector<Node> nodes_;
  std::unique_ptr<class JsonGrammar> json_;
};

std::shared_ptr<const Grammar> compile_json_schema(const boost::json::value& schema,
                                                   const GrammarLimits& limits = {});

// Throws GrammarLimitExceeded when a few hundred code points, each chosen to keep as many
// readings alive as possible, take the grammar past limits().max_stacks: a grammar that is
// refused before it is used rather than failing part-way through an answer. A heuristic: it
// follows one text, not all of them.
void probe_ambiguity(const Grammar& grammar, size_t code_points = 128);

}  // namespace chatflow::grammar
