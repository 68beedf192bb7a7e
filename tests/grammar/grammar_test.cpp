// chatflow_grammar: what each JSON Schema keyword accepts and refuses, the matcher over split
// UTF-8, integer and number ranges, regex patterns, masks against brute force, and random walks
// that must end in JSON satisfying the schema.
#include "framework/grammar/grammar.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/grammar/matcher.h"
#include "framework/grammar/token_masker.h"

namespace chatflow::grammar {
namespace {

namespace json = boost::json;

std::shared_ptr<const Grammar> schema(const char* text) {
  return compile_json_schema(json::parse(text));
}

bool accepts(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  Matcher matcher(grammar);
  return matcher.advance(text) && matcher.accepting();
}

bool continues(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  Matcher matcher(grammar);
  return matcher.advance(text);
}

struct Refusal {
  std::string keyword;
  std::string pointer;
};

Refusal refusal(const char* text) {
  try {
    compile_json_schema(json::parse(text));
  } catch (const SchemaError& error) {
    return {error.keyword(), error.pointer()};
  }
  return {"(compiled)", ""};
}

// --- the builder and the matcher ---

TEST(GrammarBuilder, ComposesLiteralsSequencesChoicesAndRepeats) {
  GrammarBuilder b;
  auto root = b.sequence({b.literal("a"), b.choice({b.literal("b"), b.literal("cd")}),
                          b.repeat(b.literal("x"), 1, 3)});
  auto grammar = b.build(root);
  EXPECT_TRUE(accepts(grammar, "abx"));
  EXPECT_TRUE(accepts(grammar, "acdxxx"));
  EXPECT_FALSE(accepts(grammar, "ab"));
  EXPECT_FALSE(accepts(grammar, "abxxxx"));
  EXPECT_FALSE(accepts(grammar, "ac"));
  EXPECT_TRUE(continues(grammar, "ac"));
}

TEST(GrammarBuilder, RecursiveRulesNestWithoutLimit) {
  GrammarBuilder b;
  auto parens = b.rule();
  b.define(parens, b.repeat(b.sequence({b.literal("("), parens, b.literal(")")}), 0, -1));
  auto grammar = b.build(parens);
  EXPECT_TRUE(accepts(grammar, ""));
  EXPECT_TRUE(accepts(grammar, "(()())((()))"));
  EXPECT_TRUE(accepts(grammar, std::string(200, '(') + std::string(200, ')')));
  EXPECT_FALSE(accepts(grammar, "(()"));
  EXPECT_FALSE(continues(grammar, "())"));
}

TEST(GrammarBuilder, RefusesLeftRecursionAndEmptyLanguages) {
  GrammarBuilder b;
  auto left = b.rule();
  b.define(left, b.choice({b.sequence({left, b.literal("a")}), b.literal("b")}));
  EXPECT_THROW(b.build(left), std::invalid_argument);
  GrammarBuilder c;
  EXPECT_THROW(c.build(c.chars({})), std::invalid_argument);
}

TEST(Matcher, AdvanceIsAllOrNothing) {
  GrammarBuilder b;
  auto grammar = b.build(b.literal("hello"));
  Matcher matcher(grammar);
  ASSERT_TRUE(matcher.advance("he"));
  Matcher before = matcher;
  EXPECT_FALSE(matcher.advance("lx"));
  EXPECT_EQ(matcher, before);
  EXPECT_TRUE(matcher.advance("llo"));
  EXPECT_TRUE(matcher.accepting());
  EXPECT_FALSE(matcher.can_continue());
}

TEST(Matcher, Utf8SplitAcrossAdvanceCalls) {
  GrammarBuilder b;
  std::string text = "h\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E!";  // hé€𝄞!
  auto grammar = b.build(b.literal(text));
  Matcher matcher(grammar);
  for (char byte : text) {
    EXPECT_FALSE(matcher.accepting());
    ASSERT_TRUE(matcher.advance(std::string_view(&byte, 1)));
  }
  EXPECT_TRUE(matcher.accepting());
  // A partial character is a state of its own, and accepts only its own continuation.
  Matcher partial(grammar);
  ASSERT_TRUE(partial.advance("h\xC3\xA9\xE2\x82"));
  EXPECT_FALSE(partial.accepting());
  EXPECT_TRUE(partial.can_continue());
  EXPECT_FALSE(partial.advance("\xAD"));  // U+20AD, not U+20AC
  EXPECT_TRUE(partial.advance("\xAC"));
}

TEST(Matcher, RefusesMalformedUtf8) {
  GrammarBuilder b;
  auto grammar = b.build(b.repeat(b.chars({}, true), 0, -1));  // any text
  EXPECT_TRUE(accepts(grammar, "\xF0\x9F\x98\x80"));
  EXPECT_FALSE(continues(grammar, "\xC0\xAF"));  // overlong
  EXPECT_FALSE(continues(grammar, "\xE0\x80"));  // overlong prefix
  EXPECT_FALSE(continues(grammar, "\xED\xA0"));  // surrogate prefix
  EXPECT_FALSE(continues(grammar, "\xF4\x90"));  // above U+10FFFF
  EXPECT_FALSE(continues(grammar, "\x80"));      // stray continuation
  EXPECT_FALSE(continues(grammar, "\xC3\x41"));  // lead without continuation
}

TEST(Matcher, StatesCompareAndHashByContent) {
  auto grammar = schema(R"({"type":"string"})");
  Matcher a(grammar), b(grammar);
  ASSERT_TRUE(a.advance("\"ab"));
  ASSERT_TRUE(b.advance("\"x"));
  ASSERT_TRUE(b.advance("y"));
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::hash<Matcher>()(a), std::hash<Matcher>()(b));
}

TEST(Regex, WholeTextMatches) {
  GrammarBuilder b;
  auto grammar = b.build(b.regex("[a-c]+(x|yz)?\\d{2}"));
  EXPECT_TRUE(accepts(grammar, "abc12"));
  EXPECT_TRUE(accepts(grammar, "ayz99"));
  EXPECT_FALSE(accepts(grammar, "abc1"));
  EXPECT_FALSE(accepts(grammar, "dx12"));
  EXPECT_THROW(b.regex("(a)\\1"), SchemaError);
}

// --- JSON text shape ---

TEST(JsonShape, AtMostOneSpaceBetweenTokensAndNothingAfter) {
  auto any = schema("{}");
  EXPECT_TRUE(accepts(any, R"({"a": [1, 2.5, true, null, "x"]})"));
  EXPECT_TRUE(accepts(any, R"({ "a" : { } , "b":[ ] })"));
  EXPECT_FALSE(continues(any, R"({"a":  1})"));
  EXPECT_FALSE(continues(any, R"({"a":1} )"));
  EXPECT_FALSE(continues(any, " {}"));
  EXPECT_FALSE(continues(any, "\n"));
}

TEST(JsonShape, NumbersHaveBoundedDigits) {
  auto number = schema(R"({"type":"number"})");
  EXPECT_TRUE(accepts(number, "-0.5e+10"));
  EXPECT_TRUE(accepts(number, "1234567890123456"));
  EXPECT_FALSE(continues(number, "12345678901234567"));
  EXPECT_TRUE(accepts(number, "1.1234567890123456"));
  EXPECT_FALSE(continues(number, "1.12345678901234567"));
  EXPECT_FALSE(continues(number, "1e1234"));
  EXPECT_FALSE(continues(number, "01"));
  EXPECT_FALSE(continues(number, "1. 5"));
  EXPECT_FALSE(accepts(number, "1."));
}

TEST(JsonShape, StringsAreJsonStrings) {
  auto string = schema(R"({"type":"string"})");
  EXPECT_TRUE(accepts(string, R"("a\"b\\c\/d\b\f\n\r\t\u00e9")"));
  EXPECT_TRUE(accepts(string, "\"caf\xC3\xA9\""));
  EXPECT_FALSE(continues(string, "\"a\nb"));       // raw control character
  EXPECT_FALSE(continues(string, R"("\x")"));      // unknown escape
  EXPECT_FALSE(continues(string, R"("\ud800")"));  // lone surrogate escape
  EXPECT_FALSE(continues(string, "\"a\" "));
}

// --- keywords ---

TEST(JsonSchema, Types) {
  EXPECT_TRUE(accepts(schema(R"({"type":"null"})"), "null"));
  EXPECT_FALSE(continues(schema(R"({"type":"null"})"), "nul1"));
  EXPECT_TRUE(accepts(schema(R"({"type":"boolean"})"), "false"));
  auto integer = schema(R"({"type":"integer"})");
  EXPECT_TRUE(accepts(integer, "-42"));
  EXPECT_FALSE(continues(integer, "4.2"));
  auto several = schema(R"({"type":["string","null"]})");
  EXPECT_TRUE(accepts(several, "null"));
  EXPECT_TRUE(accepts(several, "\"s\""));
  EXPECT_FALSE(continues(several, "1"));
}

TEST(JsonSchema, PropertiesInOrderWithRequiredAndOptional) {
  auto object = schema(R"({"type":"object","properties":{
      "a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
      "required":["a","c"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(object, R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(accepts(object, R"({"a": 1, "c": false})"));
  EXPECT_FALSE(accepts(object, R"({"a":1})"));
  EXPECT_FALSE(continues(object, R"({"c":true)"));   // out of order
  EXPECT_FALSE(continues(object, R"({"a":1,"d")"));  // extra key
  EXPECT_FALSE(continues(object, R"({"a":"1")"));    // wrong type
  EXPECT_FALSE(continues(object, R"({})"));
}

TEST(JsonSchema, AllOptionalPropertiesAllowTheEmptyObject) {
  auto object = schema(R"({"properties":{"a":{"type":"integer"},"b":{"type":"integer"}}})");
  EXPECT_TRUE(accepts(object, "{}"));
  EXPECT_TRUE(accepts(object, "{ }"));
  EXPECT_TRUE(accepts(object, R"({"b":2})"));
  EXPECT_TRUE(accepts(object, R"({"a":1, "b":2 })"));
  EXPECT_FALSE(continues(object, R"({,)"));
  EXPECT_FALSE(continues(object, R"({"a":1,})"));
  EXPECT_FALSE(continues(object, R"({"x")"));  // additionalProperties absent: none generated
}

TEST(JsonSchema, AdditionalPropertiesTrueOrASchema) {
  auto open = schema(R"({"properties":{"a":{"type":"integer"}},"additionalProperties":true})");
  EXPECT_TRUE(accepts(open, R"({"a":1,"zz":[null]})"));
  EXPECT_TRUE(accepts(open, R"({"zz":{}})"));
  auto typed = schema(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(accepts(typed, R"({"x":1,"y":2})"));
  EXPECT_FALSE(continues(typed, R"({"x":"1")"));
  auto required_extra = schema(R"({"type":"object","required":["k"]})");
  EXPECT_TRUE(accepts(required_extra, R"({"k":[1]})"));
  EXPECT_FALSE(accepts(required_extra, "{}"));
}

TEST(JsonSchema, EnumAndConst) {
  auto colours = schema(R"({"type":"string","enum":["red","green",3]})");
  EXPECT_TRUE(accepts(colours, R"("red")"));
  EXPECT_TRUE(accepts(colours, R"("green")"));
  EXPECT_FALSE(continues(colours, "3"));  // not a string
  EXPECT_FALSE(accepts(colours, R"("blue")"));
  auto mixed = schema(R"({"enum":[1,"a",null,{"k":[true]}]})");
  EXPECT_TRUE(accepts(mixed, R"({"k":[true]})"));
  EXPECT_TRUE(accepts(mixed, "null"));
  auto fixed = schema(R"({"const":"get_weather"})");
  EXPECT_TRUE(accepts(fixed, R"("get_weather")"));
  EXPECT_FALSE(continues(fixed, R"("get_w_)"));
}

TEST(JsonSchema, ItemsPrefixItemsAndCounts) {
  auto list = schema(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(accepts(list, "[1]"));
  EXPECT_TRUE(accepts(list, "[1, 2]"));
  EXPECT_TRUE(accepts(list, "[1,2,3]"));
  EXPECT_FALSE(continues(list, "[1,2,3,"));
  EXPECT_FALSE(continues(list, "[\"a\""));
  auto tuple = schema(R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})");
  EXPECT_TRUE(accepts(tuple, "[]"));
  EXPECT_TRUE(accepts(tuple, R"(["a"])"));
  EXPECT_TRUE(accepts(tuple, R"(["a",1])"));
  EXPECT_FALSE(continues(tuple, R"(["a",1,)"));
  EXPECT_FALSE(continues(tuple, R"([1)"));
  auto tail = schema(R"({"prefixItems":[{"const":0}],"items":{"type":"boolean"},"minItems":2})");
  EXPECT_TRUE(accepts(tail, "[0,true,false]"));
  EXPECT_FALSE(accepts(tail, "[0]"));
}

TEST(JsonSchema, AnyOfTwoObjectsSharingAPrefix) {
  auto either = schema(R"({"anyOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
      {"type":"object","properties":{"kind":{"const":"a"},"y":{"type":"string"}},"required":["kind","y"]}]})");
  EXPECT_TRUE(accepts(either, R"({"kind":"a","x":1})"));
  EXPECT_TRUE(accepts(either, R"({"kind":"a","y":"s"})"));
  EXPECT_FALSE(continues(either, R"({"kind":"a","z")"));
  auto one_of = schema(R"({"oneOf":[{"type":"integer"},{"type":"null"}]})");
  EXPECT_TRUE(accepts(one_of, "7"));
  EXPECT_TRUE(accepts(one_of, "null"));
}

TEST(JsonSchema, AllOfWithOneMemberAndNullable) {
  auto wrapped = schema(R"({"allOf":[{"type":"integer"}],"nullable":true})");
  EXPECT_TRUE(accepts(wrapped, "3"));
  EXPECT_TRUE(accepts(wrapped, "null"));
  EXPECT_FALSE(continues(wrapped, "\""));
}

TEST(JsonSchema, RecursiveRefTree) {
  auto tree = schema(R"({"$defs":{"node":{"type":"object","properties":{
      "value":{"type":"integer"},
      "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["value","children"],"additionalProperties":false}},
      "$ref":"#/$defs/node"})");
  EXPECT_TRUE(accepts(tree, R"({"value":1,"children":[]})"));
  EXPECT_TRUE(accepts(
      tree,
      R"({"value":1,"children":[{"value":2,"children":[{"value":3,"children":[]}]},{"value":4,"children":[]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"value":1,"children":[{"value":2}]})"));
  auto root_ref = schema(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})");
  EXPECT_TRUE(accepts(root_ref, "[1,[2,[3,[]]]]"));
  auto definitions = schema(
      R"({"definitions":{"id":{"type":"integer"}},"properties":{"a":{"$ref":"#/definitions/id"}},"required":["a"]})");
  EXPECT_TRUE(accepts(definitions, R"({"a":5})"));
}

TEST(JsonSchema, StringLengthsCountCodePoints) {
  auto short_string = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(accepts(short_string, "\"a\""));
  EXPECT_TRUE(accepts(short_string, "\"ab\""));
  EXPECT_TRUE(accepts(short_string, "\"\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E\""));  // é€𝄞
  EXPECT_FALSE(continues(short_string,
                         "\"\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E"
                         "a"));
  EXPECT_TRUE(accepts(short_string, R"("\n\u0041b")"));  // an escape is one code point
  EXPECT_FALSE(continues(short_string, R"("abcd)"));
}

TEST(JsonSchema, IntegerRangeIsExact) {
  auto range = schema(R"({"type":"integer","minimum":-15,"maximum":123})");
  for (int value = -300; value <= 300; ++value)
    EXPECT_EQ(accepts(range, std::to_string(value)), value >= -15 && value <= 123) << value;
  EXPECT_FALSE(continues(range, "-0"));
  EXPECT_FALSE(continues(range, "007"));
  EXPECT_FALSE(continues(range, "1234"));
  auto exclusive = schema(R"({"type":"integer","exclusiveMinimum":-1.5,"exclusiveMaximum":10})");
  for (int value = -30; value <= 30; ++value)
    EXPECT_EQ(accepts(exclusive, std::to_string(value)), value >= -1 && value <= 9) << value;
  auto large = schema(R"({"type":"integer","minimum":123456789012,"maximum":123456799999})");
  EXPECT_TRUE(accepts(large, "123456789012"));
  EXPECT_TRUE(accepts(large, "123456795555"));
  EXPECT_TRUE(accepts(large, "123456799999"));
  EXPECT_FALSE(accepts(large, "123456789011"));
  EXPECT_FALSE(accepts(large, "123456800000"));
  EXPECT_FALSE(accepts(large, "12345678901"));
  auto floor = schema(R"({"type":"integer","minimum":1000})");
  EXPECT_TRUE(accepts(floor, "1000"));
  EXPECT_TRUE(accepts(floor, "9999999999999999"));
  EXPECT_FALSE(accepts(floor, "999"));
  EXPECT_FALSE(accepts(floor, "-5000"));
}

TEST(JsonSchema, NumberBetweenIntegerBounds) {
  auto unit = schema(R"({"type":"number","minimum":0,"maximum":1})");
  for (const char* ok : {"0", "0.5", "1", "1.0", "1.000", "0.999"})
    EXPECT_TRUE(accepts(unit, ok)) << ok;
  for (const char* bad : {"1.5", "-0.1", "2", "1.01", "-1", "10"})
    EXPECT_FALSE(accepts(unit, bad)) << bad;
  EXPECT_FALSE(continues(unit, "1e"));
  auto open = schema(R"({"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":3})");
  for (const char* ok : {"-1.99", "-1", "0", "2.999", "-0.5"})
    EXPECT_TRUE(accepts(open, ok)) << ok;
  for (const char* bad : {"-2", "-2.0", "3", "3.0", "-2.5", "3.01"})
    EXPECT_FALSE(accepts(open, bad)) << bad;
}

TEST(JsonSchema, PatternsAreUnanchoredUnlessAnchored) {
  auto anchored = schema(R"({"type":"string","pattern":"^[a-z]+-\\d{2,3}$"})");
  EXPECT_TRUE(accepts(anchored, R"("abc-12")"));
  EXPECT_TRUE(accepts(anchored, R"("x-123")"));
  EXPECT_FALSE(accepts(anchored, R"("x-1")"));
  EXPECT_FALSE(continues(anchored, R"("Abc)"));
  auto search = schema(R"({"type":"string","pattern":"ab"})");
  EXPECT_TRUE(accepts(search, R"("xxaby")"));
  EXPECT_TRUE(accepts(search, R"("ab")"));
  EXPECT_FALSE(accepts(search, R"("ba")"));
  auto alternation = schema(R"({"pattern":"^(?:cat|dog)s?$|^[^a-z]$"})");
  EXPECT_TRUE(accepts(alternation, R"("dogs")"));
  EXPECT_TRUE(accepts(alternation, R"("Z")"));
  EXPECT_FALSE(accepts(alternation, R"("z")"));
  auto quotes = schema(R"({"type":"string","pattern":"^a\"\\\\.$"})");  // a " \ any
  EXPECT_TRUE(accepts(quotes, R"("a\"\\x")"));
  EXPECT_TRUE(accepts(quotes, R"("a\"\\\t")"));
  EXPECT_FALSE(continues(quotes, R"("a")"));
  auto classes = schema(R"({"pattern":"^[\\w.]+@\\S+$"})");
  EXPECT_TRUE(accepts(classes, R"("a.b_c@x")"));
  EXPECT_FALSE(continues(classes, R"("a b)"));
}

TEST(JsonSchema, Formats) {
  auto date = schema(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(accepts(date, R"("2024-02-29")"));
  EXPECT_FALSE(accepts(date, R"("2024-13-01")"));
  auto uuid = schema(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(accepts(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(continues(uuid, R"("123e4567e)"));
  auto ip = schema(R"({"type":"string","format":"ipv4"})");
  EXPECT_TRUE(accepts(ip, R"("192.168.0.255")"));
  EXPECT_FALSE(accepts(ip, R"("256.1.1.1")"));
  auto email = schema(R"({"type":"string","format":"email"})");
  EXPECT_TRUE(accepts(email, R"("jo.smith@example.co.uk")"));
  EXPECT_FALSE(accepts(email, R"("jo@localhost")"));
  auto when = schema(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(accepts(when, R"("2024-01-02T03:04:05.678Z")"));
  EXPECT_TRUE(accepts(when, R"("2024-01-02T03:04:05+01:00")"));
  EXPECT_TRUE(accepts(schema(R"({"format":"time"})"), R"("23:59:60Z")"));
  EXPECT_TRUE(accepts(schema(R"({"format":"hostname"})"), R"("api.example.com")"));
}

TEST(JsonSchema, AnnotationsAreIgnored) {
  auto annotated = schema(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x",
      "title":"T","description":"D","default":1,"examples":[1],"$comment":"c","deprecated":false,
      "readOnly":true,"writeOnly":false,"type":"integer"})");
  EXPECT_TRUE(accepts(annotated, "1"));
}

TEST(JsonSchema, RefusesEachUnsupportedKeywordByNameAndPointer) {
  struct Case {
    const char* schema;
    const char* keyword;
    const char* pointer;
  };
  const Case cases[] = {
      {R"({"not":{"type":"string"}})", "not", "/not"},
      {R"({"if":{},"then":{}})", "if", "/if"},
      {R"({"properties":{"a":{"dependentSchemas":{}}}})", "dependentSchemas",
       "/properties/a/dependentSchemas"},
      {R"({"patternProperties":{}})", "patternProperties", "/patternProperties"},
      {R"({"propertyNames":{}})", "propertyNames", "/propertyNames"},
      {R"({"type":"array","uniqueItems":true})", "uniqueItems", "/uniqueItems"},
      {R"({"type":"integer","multipleOf":3})", "multipleOf", "/multipleOf"},
      {R"({"minProperties":1})", "minProperties", "/minProperties"},
      {R"({"maxProperties":1})", "maxProperties", "/maxProperties"},
      {R"({"items":{"contains":{}}})", "contains", "/items/contains"},
      {R"({"unevaluatedProperties":false})", "unevaluatedProperties", "/unevaluatedProperties"},
      {R"({"$dynamicRef":"#x"})", "$dynamicRef", "/$dynamicRef"},
      {R"({"type":"string","pattern":"(a)\\1"})", "pattern", "/pattern"},
      {R"j({"type":"string","pattern":"(?=a)"})j", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"\\bword"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"a^b"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"(a?){3}"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"(a{1,100}){1,100}"})", "pattern", "/pattern"},
      {R"({"type":"string","format":"uri"})", "format", "/format"},
      {R"({"type":"number","minimum":0.5})", "minimum", "/minimum"},
      {R"({"type":"number","exclusiveMaximum":2.25})", "exclusiveMaximum", "/exclusiveMaximum"},
      {R"({"type":"integer","exclusiveMinimum":true})", "exclusiveMinimum", "/exclusiveMinimum"},
      {R"({"$ref":"other.json#/x"})", "$ref", "/$ref"},
      {R"({"$ref":"#/$defs/missing"})", "$ref", "/$ref"},
      {R"({"$ref":"#"})", "$ref", "/$ref"},
      {R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"}]},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})",
       "$ref", "/$defs/b/$ref"},
      // Left recursion through the root, entered again by reference.
      {R"({"anyOf":[{"type":"array","items":{"$ref":"#/$defs/b"}},{"$ref":"#/$defs/b"}],"$defs":{"b":{"$ref":"#"}}})",
       "$ref", "/anyOf/1/$ref"},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf", "/allOf"},
      {R"({"type":"strin"})", "type", "/type"},
      {R"({"type":"string","minLength":5,"maxLength":2})", "minLength", "/minLength"},
      {R"({"type":"string","maxLength":-1})", "maxLength", "/maxLength"},
      {R"({"properties":{"a":7}})", "schema", "/properties/a"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "minimum", "/minimum"},
      {R"({"type":"string","enum":["a"],"maxLength":3})", "maxLength", "/maxLength"},
      {R"({"anyOf":[{"type":"string"}],"minLength":1})", "minLength", "/minLength"},
      {R"({"items":[{"type":"string"}]})", "items", "/items"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false})",
       "required", "/required"},
      {"false", "false", ""},
  };
  for (const Case& c : cases) {
    Refusal r = refusal(c.schema);
    EXPECT_EQ(r.keyword, c.keyword) << c.schema;
    EXPECT_EQ(r.pointer, c.pointer) << c.schema;
  }
}

TEST(JsonSchema, DeepNestingIsRefusedNotOverflowed) {
  std::string deep;
  for (int i = 0; i < 200; ++i)
    deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 200; ++i)
    deep += "}";
  json::parse_options options;
  options.max_depth = 1000;
  Refusal r;
  try {
    compile_json_schema(json::parse(deep, {}, options));
  } catch (const SchemaError& error) {
    r = {error.keyword(), error.pointer()};
  }
  EXPECT_EQ(r.keyword, "items");
  EXPECT_EQ(r.pointer.substr(0, 13), "/items/items/");
  std::string groups =
      R"({"pattern":")" + std::string(100, '(') + "a" + std::string(100, ')') + R"("})";
  EXPECT_THROW(compile_json_schema(json::parse(groups)), SchemaError);
}

TEST(JsonSchema, AnyJsonObjectForResponseFormat) {
  GrammarBuilder b;
  auto grammar = b.build(b.any_json_object());
  EXPECT_TRUE(accepts(grammar, R"({"a":{"b":[1,{"c":null}]}})"));
  EXPECT_FALSE(continues(grammar, "["));
  EXPECT_FALSE(continues(grammar, "1"));
}

// --- masks ---

std::vector<std::string> small_vocabulary() {
  return {"",
          "{",
          "}",
          "\"",
          "\":",
          ":",
          ",",
          " ",
          "a",
          "ab",
          "\"a",
          "\"name\"",
          "1",
          "12",
          "-",
          "0",
          "true",
          "tr",
          "ue",
          "null",
          "[",
          "]",
          "],",
          "\xC3",
          "\xA9",
          "\xC3\xA9",
          "\xE2\x82",
          "\xAC",
          "\\",
          "\\n",
          "\\u00",
          "e9",
          "x\"",
          "\"}",
          " \"",
          "3,",
          ".",
          "5",
          "e",
          "E+",
          "\xF0\x9D\x84\x9E",
          "é\"",
          "{\"",
          "\"k\": ",
          "zz"};
}

std::vector<uint64_t> brute_force_mask(const Matcher& state,
                                       const std::vector<std::string>& vocabulary) {
  std::vector<uint64_t> mask((vocabulary.size() + 63) / 64, 0);
  for (size_t i = 0; i < vocabulary.size(); ++i) {
    if (vocabulary[i].empty()) continue;
    Matcher copy = state;
    if (copy.advance(vocabulary[i])) mask[i / 64] |= uint64_t{1} << (i % 64);
  }
  return mask;
}

bool allowed(const std::vector<uint64_t>& mask, size_t token) {
  return (mask[token / 64] >> (token % 64) & 1) != 0;
}

const char* kWalkSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
        "n":{"type":"integer","minimum":-15,"maximum":123},"tag":{"enum":["a","ab","null"]},
        "ok":{"type":"boolean"}},"required":["name","n"],"additionalProperties":false})",
    R"({"type":"array","items":{"type":"object","properties":{"k":{"type":"string","maxLength":10},
        "v":{"type":["number","null"]}},"required":["k"]},"maxItems":4})",
    R"({"$defs":{"node":{"type":"object","properties":{"a":{"type":"array","maxItems":3,
        "items":{"$ref":"#/$defs/node"}}}}},"$ref":"#/$defs/node"})",
    R"({"type":"string","pattern":"^[a-e\u00e9]{1,5}\\d?$"})",
    R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"type":"object",
        "properties":{"city":{"type":"string","minLength":1,"maxLength":8},"days":{"type":"integer",
        "minimum":1,"maximum":14}},"required":["city","days"],"additionalProperties":false}},
        "required":["name","arguments"],"additionalProperties":false})",
    R"({"type":"number","minimum":0,"maximum":1})",
};

TEST(TokenMasker, MaskEqualsBruteForceOverManyStates) {
  std::vector<std::string> vocabulary = small_vocabulary();
  auto table = make_token_table(vocabulary);
  std::mt19937 random(7);
  int states = 0;
  for (const char* text : kWalkSchemas) {
    auto grammar = schema(text);
    TokenMasker masker(grammar, table);
    for (int walk = 0; walk < 30; ++walk) {
      Matcher state(grammar);
      for (int step = 0; step < 40; ++step) {
        auto mask = masker.allowed(state);
        ASSERT_EQ(*mask, brute_force_mask(state, vocabulary)) << text << " step " << step;
        ++states;
        std::vector<size_t> choices;
        for (size_t i = 0; i < vocabulary.size(); ++i)
          if (allowed(*mask, i)) choices.push_back(i);
        if (choices.empty()) break;
        ASSERT_TRUE(state.advance(vocabulary[choices[random() % choices.size()]]));
      }
    }
  }
  EXPECT_GT(states, 1000);
}

TEST(TokenMasker, RepeatedStatesHitTheCache) {
  auto grammar = schema(R"({"type":"string"})");
  TokenMasker masker(grammar, make_token_table(small_vocabulary()));
  Matcher state(grammar);
  ASSERT_TRUE(state.advance("\"a"));
  auto first = masker.allowed(state);
  ASSERT_TRUE(state.advance("ab"));
  auto second = masker.allowed(state);
  EXPECT_EQ(first, second);  // the same cached mask
  EXPECT_EQ(masker.stats().hits, 1u);
  EXPECT_EQ(masker.stats().misses, 1u);
}

TEST(TokenMasker, SharedByThreads) {
  std::vector<std::string> vocabulary = small_vocabulary();
  auto grammar = schema(kWalkSchemas[0]);
  TokenMasker masker(grammar, make_token_table(vocabulary), 8);  // small: evictions race too
  std::vector<std::thread> threads;
  std::atomic<int> mismatches = 0;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(t);
      for (int walk = 0; walk < 20; ++walk) {
        Matcher state(grammar);
        for (int step = 0; step < 30; ++step) {
          auto mask = masker.allowed(state);
          if (*mask != brute_force_mask(state, vocabulary)) ++mismatches;
          std::vector<size_t> choices;
          for (size_t i = 0; i < vocabulary.size(); ++i)
            if (allowed(*mask, i)) choices.push_back(i);
          if (choices.empty()) break;
          state.advance(vocabulary[choices[random() % choices.size()]]);
        }
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(mismatches, 0);
}

TEST(TokenMasker, ApplyMaskForbidsTheRest) {
  std::vector<uint64_t> mask(2, 0);
  mask[0] = 0b101;
  mask[1] = uint64_t{1} << 1;
  std::vector<float> logits(70, 1.0f);
  apply_mask(mask, logits.data(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_EQ(std::isinf(logits[i]), !(i == 0 || i == 2 || i == 65)) << i;
}

// --- what one grammar may cost (GrammarLimits, WorkBudget) ---

// An anyOf of `count` copies of {"type": "string", "pattern": PATTERN}.
std::string any_of_patterns(int count, const std::string& pattern) {
  json::array members;
  for (int i = 0; i < count; ++i)
    members.push_back(json::object{{"type", "string"}, {"pattern", pattern}});
  return json::serialize(json::object{{"anyOf", members}});
}

size_t readings(const Matcher& matcher) {
  return matcher.state()[0];
}

TEST(GrammarLimits, AnUnanchoredPatternThatCanMatchNothingIsOneReadingOfAnyText) {
  // The outside probe's schema: 50 branches of .{0,1000}, unanchored. Each such pattern matches
  // every string, so it holds as many readings as one `^.*$`, however long the text.
  auto probe = compile_json_schema(json::parse(any_of_patterns(50, ".{0,1000}")));
  auto plain = schema(R"({"type":"string","pattern":"^.*$"})");
  std::string text = "\"" + std::string(300, 'x');
  Matcher probed(probe);
  Matcher single(plain);
  ASSERT_TRUE(probed.advance(text));
  ASSERT_TRUE(single.advance(text));
  EXPECT_EQ(readings(probed), readings(single));
  EXPECT_TRUE(accepts(probe, text + "\""));
  // Unanchored, it finds its empty match in any string, one with a line break too; but a raw
  // control character is not JSON.
  EXPECT_TRUE(accepts(probe, text + "\\n\""));
  EXPECT_FALSE(accepts(probe, text + "\n\""));
  EXPECT_FALSE(accepts(probe, text)) << "still a JSON string: it must close";
}

TEST(GrammarLimits, RepeatedAnyOfMembersAddNoReadings) {
  auto once = compile_json_schema(json::parse(any_of_patterns(1, "x.{0,20}")));
  auto many = compile_json_schema(json::parse(any_of_patterns(50, "x.{0,20}")));
  Matcher one(once), fifty(many);
  ASSERT_TRUE(one.advance("\"axxb"));
  ASSERT_TRUE(fifty.advance("\"axxb"));
  EXPECT_EQ(one.state(), fifty.state());
}

TEST(GrammarLimits, AStateWithMoreReadingsThanItsLimitIsRefused) {
  GrammarBuilder b;
  std::vector<GrammarBuilder::Expr> words;
  for (int i = 0; i < 20; ++i)
    words.push_back(b.sequence({b.literal("a"), b.literal(std::to_string(i))}));
  GrammarLimits limits;
  limits.max_stacks = 8;
  auto grammar = b.build(b.choice(words), limits);
  EXPECT_THROW(Matcher{grammar}, GrammarLimitExceeded);  // 20 readings at the start
  limits.max_stacks = 20;
  auto roomy = b.build(b.choice(words), limits);
  Matcher matcher(roomy);
  EXPECT_TRUE(matcher.advance("a1"));
}

TEST(GrammarLimits, ProbeRefusesAGrammarWhoseReadingsMultiplyAsItGoes) {
  // Unanchored x.{0,1000} fifty times over (distinct members, so none is dropped): every 'x'
  // opens fifty more readings.
  json::array members;
  for (int i = 0; i < 50; ++i)
    members.push_back(
        json::object{{"type", "string"}, {"pattern", "x.{0," + std::to_string(900 + i) + "}"}});
  auto grammar = compile_json_schema(json::object{{"anyOf", members}});
  EXPECT_THROW(probe_ambiguity(*grammar), GrammarLimitExceeded);
  EXPECT_NO_THROW(probe_ambiguity(*schema(kWalkSchemas[0])));
  EXPECT_NO_THROW(probe_ambiguity(*schema(R"({"type":"string","pattern":"x.{0,1000}"})")));
}

TEST(GrammarLimits, BuildRefusesAGrammarLargerThanItsSymbolBudget) {
  GrammarBuilder b;
  auto root = b.repeat(b.literal("abc"), 0, 1000);
  GrammarLimits limits;
  limits.max_symbols = 2000;
  EXPECT_THROW(b.build(root, limits), GrammarLimitExceeded);
  limits.max_symbols = 20000;
  EXPECT_NO_THROW(b.build(root, limits));
}

TEST(TokenMasker, CancelledWorkStopsAndCachesNothing) {
  auto grammar = schema(kWalkSchemas[0]);
  TokenMasker masker(grammar, make_token_table(small_vocabulary()));
  Matcher state(grammar);
  std::atomic<bool> cancelled{true};
  EXPECT_THROW(masker.allowed(state, {std::chrono::steady_clock::time_point::max(), &cancelled}),
               GrammarWorkCancelled);
  EXPECT_EQ(masker.cached(state), nullptr);
  cancelled = false;
  auto mask = masker.allowed(state, {std::chrono::steady_clock::time_point::max(), &cancelled});
  EXPECT_EQ(masker.cached(state), mask);
}

TEST(TokenMasker, WorkPastItsDeadlineIsRefused) {
  auto grammar = schema(kWalkSchemas[0]);
  TokenMasker masker(grammar, make_token_table(small_vocabulary()));
  Matcher state(grammar);
  EXPECT_THROW(masker.allowed(state, {std::chrono::steady_clock::now(), nullptr}),
               GrammarLimitExceeded);
  EXPECT_EQ(masker.cached(state), nullptr);
}

TEST(TokenMasker, WorkingMemoryIsBounded) {
  // Every token of a vocabulary of long words is a new parse state of a counted repeat.
  std::vector<std::string> vocabulary;
  for (int i = 0; i < 2000; ++i)
    vocabulary.push_back("\"" + std::to_string(i * 7919) +
                         std::string(static_cast<size_t>(i % 40), 'a'));
  GrammarLimits limits;
  limits.max_work_bytes = 16 << 10;
  GrammarBuilder b;
  auto text = b.sequence({b.literal("\""), b.repeat(b.chars({{'0', '9'}, {'a', 'z'}}), 0, 500)});
  auto tight = b.build(text, limits);
  TokenMasker masker(tight, make_token_table(vocabulary));
  EXPECT_THROW(masker.allowed(Matcher(tight)), GrammarLimitExceeded);
  limits.max_work_bytes = 64 << 20;
  auto roomy = b.build(text, limits);
  TokenMasker roomy_masker(roomy, make_token_table(vocabulary));
  EXPECT_EQ(*roomy_masker.allowed(Matcher(roomy)), brute_force_mask(Matcher(roomy), vocabulary));
}

// --- random walks end in valid JSON ---

size_t code_points(std::string_view text) {
  size_t count = 0;
  for (char c : text)
    count += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return count;
}

// The keywords the walk schemas use, checked on a parsed value.
bool satisfies(const json::value& value, const json::value& schema, const json::value& root) {
  if (schema.is_bool()) return schema.get_bool();
  const json::object& s = schema.get_object();
  if (const json::value* ref = s.if_contains("$ref")) {
    boost::system::error_code error;
    return satisfies(value, *root.find_pointer(std::string(ref->get_string()).substr(1), error),
                     root);
  }
  if (const json::value* options = s.if_contains("anyOf")) {
    for (const json::value& option : options->get_array())
      if (satisfies(value, option, root)) return true;
    return false;
  }
  if (const json::value* fixed = s.if_contains("const")) return value == *fixed;
  if (const json::value* list = s.if_contains("enum")) {
    for (const json::value& option : list->get_array())
      if (value == option) return true;
    return false;
  }
  if (const json::value* type = s.if_contains("type")) {
    std::vector<std::string> types;
    if (type->is_string())
      types.emplace_back(type->get_string());
    else
      for (const json::value& t : type->get_array())
        types.emplace_back(t.get_string());
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "string" && value.is_string()) || (t == "boolean" && value.is_bool()) ||
           (t == "null" && value.is_null()) || (t == "object" && value.is_object()) ||
           (t == "array" && value.is_array()) || (t == "number" && value.is_number()) ||
           (t == "integer" && (value.is_int64() || value.is_uint64()));
    }
    if (!ok) return false;
  }
  if (value.is_string()) {
    std::string text(value.get_string());
    if (auto* max = s.if_contains("maxLength"); max && code_points(text) > max->to_number<size_t>())
      return false;
    if (auto* min = s.if_contains("minLength"); min && code_points(text) < min->to_number<size_t>())
      return false;
    if (auto* pattern = s.if_contains("pattern")) {
      // std::regex works on bytes: the walk pattern's one non-ASCII class member, as a unit.
      std::string regex(pattern->get_string());
      std::string byte_class = "[a-e\xC3\xA9]";
      if (size_t at = regex.find(byte_class); at != std::string::npos)
        regex.replace(at, byte_class.size(), "(?:[a-e]|\xC3\xA9)");
      if (!std::regex_search(text, std::regex(regex))) return false;
    }
  }
  if (value.is_number()) {
    double x = value.to_number<double>();
    if (auto* min = s.if_contains("minimum"); min && x < min->to_number<double>()) return false;
    if (auto* max = s.if_contains("maximum"); max && x > max->to_number<double>()) return false;
  }
  if (value.is_object()) {
    const json::object& o = value.get_object();
    const json::object* properties =
        s.contains("properties") ? &s.at("properties").get_object() : nullptr;
    if (auto* required = s.if_contains("required"))
      for (const json::value& name : required->get_array())
        if (!o.contains(name.get_string())) return false;
    for (const auto& entry : o) {
      if (properties && properties->contains(entry.key())) {
        if (!satisfies(entry.value(), properties->at(entry.key()), root)) return false;
      } else if (auto* extra = s.if_contains("additionalProperties"); extra && *extra == false) {
        return false;
      }
    }
  }
  if (value.is_array()) {
    const json::array& a = value.get_array();
    if (auto* max = s.if_contains("maxItems"); max && a.size() > max->to_number<size_t>())
      return false;
    if (auto* items = s.if_contains("items"))
      for (const json::value& item : a)
        if (!satisfies(item, *items, root)) return false;
  }
  return true;
}

TEST(RandomWalk, EndsInJsonThatSatisfiesTheSchema) {
  std::vector<std::string> vocabulary = small_vocabulary();
  for (char c = ' '; c <= '~'; ++c)
    vocabulary.emplace_back(1, c);  // every ASCII character, so any sentence can be finished
  auto table = make_token_table(vocabulary);
  std::mt19937 random(11);
  for (const char* text : kWalkSchemas) {
    json::value schema_value = json::parse(text);
    auto grammar = compile_json_schema(schema_value);
    TokenMasker masker(grammar, table);
    int finished = 0;
    for (int walk = 0; walk < 200; ++walk) {
      Matcher state(grammar);
      std::string output;
      for (int step = 0; step < 400 && !(state.accepting() && !state.can_continue()); ++step) {
        // Past 200 steps, stop as soon as the text is complete.
        if (step > 200 && state.accepting()) break;
        auto mask = masker.allowed(state);
        std::vector<size_t> choices;
        for (size_t i = 0; i < vocabulary.size(); ++i)
          if (allowed(*mask, i)) choices.push_back(i);
        ASSERT_FALSE(choices.empty()) << output;
        // Prefer closing tokens now and then, so recursive schemas finish.
        size_t choice = choices[random() % choices.size()];
        ASSERT_TRUE(state.advance(vocabulary[choice]));
        output += vocabulary[choice];
      }
      if (!state.accepting()) continue;
      ++finished;
      boost::system::error_code error;
      json::value parsed = json::parse(output, error);
      ASSERT_FALSE(error) << text << "\n" << output;
      EXPECT_TRUE(satisfies(parsed, schema_value, schema_value)) << text << "\n" << output;
    }
    EXPECT_GT(finished, 20) << text;
  }
}

}  // namespace
}  // namespace chatflow::grammar
