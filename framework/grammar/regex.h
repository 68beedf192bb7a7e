// Regular expressions (an RE2-style subset) compiled into grammar expressions: literals and
// escapes, `.`, classes with ranges and negation, \d \w \s \D \W \S, * + ? {n} {n,} {n,m} (lazy
// forms too: they match the same texts), alternation, groups (...) (?:...) (?<name>...), and ^/$
// at the ends of the top-level branches. Anything else (backreferences, lookaround, word
// boundaries, flags, Unicode classes) throws SchemaError naming "pattern".
#pragma once

#include <string_view>
#include <vector>

#include "framework/grammar/grammar.h"

namespace chatflow::grammar {

// How the matched characters are written: as themselves, or as the content of a JSON string
// (", \ and control characters escaped).
enum class RegexText { plain, json_string };

// `search`: a branch without ^ (without $) may be preceded (followed) by anything, as JSON
// Schema's unanchored `pattern` is; otherwise the whole text must match.
GrammarBuilder::Expr compile_regex(GrammarBuilder& builder, std::string_view pattern,
                                   RegexText text, bool search);

// The characters of `ranges` as written in `text`.
GrammarBuilder::Expr encode_chars(GrammarBuilder& builder,
                                  const std::vector<CodepointRange>& ranges, RegexText text);

}  // namespace chatflow::grammar
