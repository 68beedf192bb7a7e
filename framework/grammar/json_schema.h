// JSON text as grammar expressions: any value, and the values a JSON Schema (the draft 2020-12
// subset OpenAI structured outputs use) allows. The text shape is fixed so that sampling cannot
// run on forever: at most one space between tokens, none inside numbers, at most 16 integer and
// 16 fraction digits and a 3-digit exponent, strings as JSON writes them, nothing after the value.
//
// Enforced: type (and lists of types), properties (in the schema's order), required,
// additionalProperties (absent or false: no other keys are written; true or a schema: other
// string keys), enum, const, items, prefixItems, minItems, maxItems, anyOf, oneOf (as anyOf:
// overlapping branches are not checked), allOf of one member, $ref to "#", "#/$defs/...",
// "#/definitions/..." (any pointer inside the schema; recursion allowed), nullable, minLength and
// maxLength (code points, up to 10000), pattern (see regex.h; unanchored unless ^/$), format
// (date, time, date-time, uuid, ipv4, email in a simple form, hostname), integer bounds of any
// value, and number bounds that are integers (numbers then have no exponent). Annotations
// (title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
// writeOnly) are ignored. Everything else throws SchemaError naming the keyword and its JSON
// pointer, as do combinations that would need an intersection (a $ref, anyOf, oneOf, allOf,
// enum or const beside other constraints; pattern beside format or lengths), schemas nested
// deeper than 64, and $ref cycles that write no JSON text on the way round.
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
