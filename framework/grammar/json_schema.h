// JSON text as grammar expressions: any value, and the values a JSON Schema (the draft 2020-12
// subset OpenAI structured outputs use) allows. The text shape is fixed so that sampling cannot
// run on forever: at most one space between tokens, none inside numbers, at most 16 integer and
// 16 fraction digits and a 3-digit exponent, strings as JSON writes them, nothing after the value.
#pragma once

#include <optional>

#include "framework/grammar/grammar.h"

namespace chatflow::grammar {

class JsonGrammar {
 public:
  using Expr = GrammarBuilder::Expr;
  explicit JsonGrammar(GrammarBuilder& builder) : builder_(builder) {}

  Expr schema(const boost::json::value& schema);  // throws SchemaError
  Expr any_value();
  Expr any_object();

  Expr space();        // " "?
  Expr separator();    // " "? "," " "?
  Expr string();       // any JSON string
  Expr string_char();  // one code point of a string, raw or escaped
  Expr number();
  Expr integer();
  Expr boolean();
  Expr null();

  GrammarBuilder& builder() { return builder_; }

 private:
  GrammarBuilder& builder_;
  std::optional<Expr> space_, separator_, string_, string_char_, number_, integer_, value_, object_;
};

}  // namespace chatflow::grammar
