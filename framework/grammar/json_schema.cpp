// JSON Schema -> grammar. Every keyword is either enforced exactly, accepted as an annotation,
// or refused with a SchemaError naming it and its JSON pointer: none is silently ignored. The
// compiler walks the schema once; a $ref target becomes one rule (so recursive schemas work),
// and a $ref cycle that writes no JSON text on the way round is refused rather than looped on.
#include "framework/grammar/json_schema.h"

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "framework/grammar/number_range.h"
#include "framework/grammar/regex.h"

namespace chatflow::grammar {

using Expr = GrammarBuilder::Expr;
namespace json = boost::json;

Expr JsonGrammar::space() {
  if (!space_) space_ = builder_.repeat(builder_.literal(" "), 0, 1);
  return *space_;
}

Expr JsonGrammar::separator() {
  if (!separator_) separator_ = builder_.sequence({space(), builder_.literal(","), space()});
  return *separator_;
}

Expr JsonGrammar::string_char() {
  if (!string_char_) {
    GrammarBuilder& b = builder_;
    Expr hex = b.chars({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    // \uXXXX without the surrogates (a lone one is not text; pairs are written raw instead).
    Expr unicode = b.sequence(
        {b.literal("\\u"),
         b.choice({b.sequence({b.chars({{'0', '9'}, {'A', 'C'}, {'a', 'c'}}), hex, hex, hex}),
                   b.sequence({b.chars({{'D', 'D'}, {'d', 'd'}}), b.chars({{'0', '7'}}), hex, hex}),
                   b.sequence({b.chars({{'E', 'F'}, {'e', 'f'}}), hex, hex, hex})})});
    Expr escape = b.sequence({b.literal("\\"), b.chars({{'"', '"'},
                                                        {'/', '/'},
                                                        {'\\', '\\'},
                                                        {'b', 'b'},
                                                        {'f', 'f'},
                                                        {'n', 'n'},
                                                        {'r', 'r'},
                                                        {'t', 't'}})});
    Expr raw = b.chars({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    string_char_ = b.choice({raw, escape, unicode});
  }
  return *string_char_;
}

Expr JsonGrammar::string() {
  if (!string_)
    string_ = builder_.sequence(
        {builder_.literal("\""), builder_.repeat(string_char(), 0, -1), builder_.literal("\"")});
  return *string_;
}

Expr JsonGrammar::integer() {
  if (!integer_) {
    GrammarBuilder& b = builder_;
    integer_ = b.sequence(
        {b.repeat(b.literal("-"), 0, 1),
         b.choice({b.literal("0"),
                   b.sequence({b.chars({{'1', '9'}}),
                               b.repeat(b.chars({{'0', '9'}}), 0, kMaxIntegerDigits - 1)})})});
  }
  return *integer_;
}

Expr JsonGrammar::number() {
  if (!number_) {
    GrammarBuilder& b = builder_;
    Expr digit = b.chars({{'0', '9'}});
    Expr fraction = b.sequence({b.literal("."), b.repeat(digit, 1, 16)});
    Expr exponent =
        b.sequence({b.chars({{'E', 'E'}, {'e', 'e'}}),
                    b.repeat(b.chars({{'+', '+'}, {'-', '-'}}), 0, 1), b.repeat(digit, 1, 3)});
    number_ = b.sequence({integer(), b.repeat(fraction, 0, 1), b.repeat(exponent, 0, 1)});
  }
  return *number_;
}

Expr JsonGrammar::boolean() {
  return builder_.choice({builder_.literal("true"), builder_.literal("false")});
}
Expr JsonGrammar::null() {
  return builder_.literal("null");
}

Expr JsonGrammar::any_value() {
  if (!value_) {
    GrammarBuilder& b = builder_;
    Expr value = b.rule();
    value_ = value;
    Expr member = b.sequence({string(), space(), b.literal(":"), space(), value});
    Expr members =
        b.sequence({member, b.repeat(b.sequence({separator(), member}), 0, -1), space()});
    object_ = b.sequence({b.literal("{"), space(), b.repeat(members, 0, 1), b.literal("}")});
    Expr items = b.sequence({value, b.repeat(b.sequence({separator(), value}), 0, -1), space()});
    Expr array = b.sequence({b.literal("["), space(), b.repeat(items, 0, 1), b.literal("]")});
    b.define(value, b.choice({*object_, array, string(), number(), boolean(), null()}));
  }
  return *value_;
}

Expr JsonGrammar::any_object() {
  any_value();
  return *object_;
}

namespace {

constexpr int kMaxSchemaDepth = 64;
constexpr int64_t kMaxCount = 10'000;

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default",    "examples", "$schema",
    "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
const std::set<std::string, std::less<>> kKnown = {"type",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "enum",
                                                   "const",
                                                   "items",
                                                   "prefixItems",
                                                   "minItems",
                                                   "maxItems",
                                                   "anyOf",
                                                   "oneOf",
                                                   "allOf",
                                                   "$ref",
                                                   "$defs",
                                                   "definitions",
                                                   "nullable",
                                                   "minLength",
                                                   "maxLength",
                                                   "pattern",
                                                   "format",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum"};
// Keywords that constrain nothing by themselves, so may sit beside $ref, anyOf, enum, ...
const std::set<std::string, std::less<>> kNeutral = {"$defs", "definitions", "nullable"};

const std::map<std::string, const char*, std::less<>> kFormats = {
    {"date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"},
    {"time",
     "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5]["
     "0-9])"},
    {"date-time",
     "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|"
     "60)"
     "(\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"ipv4",
     "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]"
     ")){3}"},
    {"email",
     "[A-Za-z0-9_%+-]{1,32}(\\.[A-Za-z0-9_%+-]{1,32}){0,3}@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-"
     "9])?\\.)"
     "{1,4}[A-Za-z]{2,24}"},
    {"hostname",
     "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?){"
     "0,8}"},
};

std::string escape_pointer_token(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string child(const std::string& pointer, std::string_view token) {
  return pointer + "/" + escape_pointer_token(token);
}

// The last keyword on the way to `pointer` ("items" for /properties/a/items/0): what nested.
std::string nesting_keyword(const std::string& pointer) {
  size_t end = pointer.size();
  while (end > 0) {
    size_t start = pointer.rfind('/', end - 1);
    std::string token = pointer.substr(start + 1, end - start - 1);
    if (kKnown.contains(token)) return token;
    if (start == 0 || start == std::string::npos) break;
    end = start;
  }
  return "$ref";
}

class SchemaCompiler {
 public:
  SchemaCompiler(JsonGrammar& json, const json::value& root)
      : json_(json), b_(json.builder()), root_(root) {}

  Expr compile(const json::value& schema, const std::string& pointer, int depth) {
    if (depth > kMaxSchemaDepth)
      throw SchemaError(nesting_keyword(pointer), pointer,
                        "schemas nested deeper than " + std::to_string(kMaxSchemaDepth));
    if (schema.is_bool()) return schema.get_bool() ? json_.any_value() : b_.chars({});
    if (!schema.is_object())
      throw SchemaError(
          "schema", pointer,
          "a schema must be an object or a boolean, not " + json::serialize(schema).substr(0, 40));
    const json::object& object = schema.get_object();
    for (const auto& entry : object) {
      std::string_view key = entry.key();
      if (!kAnnotations.contains(key) && !kKnown.contains(key))
        throw SchemaError(std::string(key), child(pointer, key), "is not supported");
    }
    Expr result = dispatch(object, pointer, depth);
    if (const json::value* nullable = object.if_contains("nullable")) {
      if (!nullable->is_bool())
        throw SchemaError("nullable", child(pointer, "nullable"), "must be a boolean");
      if (nullable->get_bool()) result = b_.choice({result, json_.null()});
    }
    return result;
  }

 private:
  // The keyword of `object` other than `except`, annotations and neutral ones, if any.
  static const char* enforcing_sibling(const json::object& object,
                                       std::initializer_list<std::string_view> except) {
    for (const auto& entry : object) {
      std::string_view key = entry.key();
      if (kAnnotations.contains(key) || kNeutral.contains(key)) continue;
      bool excepted = false;
      for (std::string_view e : except)
        excepted = excepted || e == key;
      if (!excepted) return kKnown.find(key)->c_str();
    }
    return nullptr;
  }

  static void refuse_siblings(const json::object& object, const std::string& pointer,
                              std::initializer_list<std::string_view> except,
                              std::string_view keyword) {
    if (const char* sibling = enforcing_sibling(object, except))
      throw SchemaError(sibling, child(pointer, sibling),
                        "cannot be combined with '" + std::string(keyword) +
                            "' (the intersection is not supported)");
  }

  Expr dispatch(const json::object& object, const std::string& pointer, int depth) {
    if (object.contains("$ref")) {
      refuse_siblings(object, pointer, {"$ref"}, "$ref");
      return reference(object.at("$ref"), child(pointer, "$ref"), depth);
    }
    for (const char* keyword : {"anyOf", "oneOf", "allOf"}) {
      const json::value* members = object.if_contains(keyword);
      if (members == nullptr) continue;
      refuse_siblings(object, pointer, {keyword}, keyword);
      std::string at = child(pointer, keyword);
      if (!members->is_array() || members->get_array().empty())
        throw SchemaError(keyword, at, "must be a non-empty array of schemas");
      const json::array& array = members->get_array();
      if (std::string_view(keyword) == "allOf" && array.size() != 1)
        throw SchemaError("allOf", at, "only a single member is supported");
      std::vector<Expr> alternatives;
      std::set<std::string> members_seen;
      for (size_t i = 0; i < array.size(); ++i) {
        Expr member = compile(array[i], child(at, std::to_string(i)), depth + 1);
        // A member equal to an earlier one allows nothing more, but would double the readings
        // a matcher keeps (oneOf is enforced as anyOf, so the same holds there).
        if (members_seen.insert(json::serialize(array[i])).second) alternatives.push_back(member);
      }
      return b_.choice(std::move(alternatives));
    }
    std::vector<std::string> types = read_types(object, pointer);
    if (object.contains("const") || object.contains("enum"))
      return constants(object, pointer, types);
    if (types.empty()) types = implied_types(object);
    if (types.empty()) return json_.any_value();
    std::vector<Expr> alternatives;
    for (const std::string& type : types)
      alternatives.push_back(typed(type, object, pointer, depth));
    return b_.choice(std::move(alternatives));
  }

  static std::vector<std::string> read_types(const json::object& object,
                                             const std::string& pointer) {
    const json::value* type = object.if_contains("type");
    if (type == nullptr) return {};
    static const std::set<std::string, std::less<>> kTypes = {
        "string", "number", "integer", "boolean", "null", "object", "array"};
    std::vector<std::string> types;
    auto add = [&](const json::value& name) {
      if (!name.is_string() || !kTypes.contains(name.get_string()))
        throw SchemaError(
            "type", child(pointer, "type"),
            json::serialize(name) +
                " is not a type (string, number, integer, boolean, null, object, array)");
      types.emplace_back(name.get_string());
    };
    if (type->is_array()) {
      for (const json::value& name : type->get_array())
        add(name);
      if (types.empty())
        throw SchemaError("type", child(pointer, "type"), "an empty list of types");
    } else {
      add(*type);
    }
    return types;
  }

  static std::vector<std::string> implied_types(const json::object& object) {
    std::vector<std::string> types;
    auto any = [&](std::initializer_list<const char*> keys) {
      for (const char* key : keys)
        if (object.contains(key)) return true;
      return false;
    };
    if (any({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (any({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
    if (any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
    if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      types.push_back("number");
    return types;
  }

  static bool has_type(const json::value& value, const std::string& type) {
    if (type == "string") return value.is_string();
    if (type == "boolean") return value.is_bool();
    if (type == "null") return value.is_null();
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    if (type == "number") return value.is_number();
    if (type == "integer")
      return value.is_int64() || value.is_uint64() ||
             (value.is_double() && std::trunc(value.get_double()) == value.get_double());
    return false;
  }

  Expr constants(const json::object& object, const std::string& pointer,
                 const std::vector<std::string>& types) {
    bool is_const = object.contains("const");
    const char* keyword = is_const ? "const" : "enum";
    refuse_siblings(object, pointer, {keyword, "type"}, keyword);
    std::vector<json::value> values;
    if (is_const) {
      values.push_back(object.at("const"));
    } else {
      const json::value& list = object.at("enum");
      if (!list.is_array() || list.get_array().empty())
        throw SchemaError("enum", child(pointer, "enum"), "must be a non-empty array");
      values.assign(list.get_array().begin(), list.get_array().end());
    }
    std::vector<Expr> alternatives;
    for (const json::value& value : values) {
      bool typed = types.empty();
      for (const std::string& type : types)
        typed = typed || has_type(value, type);
      if (typed) alternatives.push_back(b_.literal(json::serialize(value)));
    }
    if (alternatives.empty())
      throw SchemaError(keyword, child(pointer, keyword), "no value has the schema's type");
    return b_.choice(std::move(alternatives));
  }

  Expr typed(const std::string& type, const json::object& object, const std::string& pointer,
             int depth) {
    if (type == "null") return json_.null();
    if (type == "boolean") return json_.boolean();
    if (type == "string") return string(object, pointer);
    if (type == "integer") return integer(object, pointer);
    if (type == "number") return number(object, pointer);
    if (type == "object") return this->object(object, pointer, depth);
    return array(object, pointer, depth);
  }

  static std::optional<int64_t> count(const json::object& object, const std::string& pointer,
                                      const char* keyword) {
    const json::value* value = object.if_contains(keyword);
    if (value == nullptr) return std::nullopt;
    bool integral = value->is_int64() || value->is_uint64() ||
                    (value->is_double() && std::trunc(value->get_double()) == value->get_double());
    if (!integral || value->to_number<double>() < 0)
      throw SchemaError(keyword, child(pointer, keyword), "must be a non-negative integer");
    double number = value->to_number<double>();
    if (number > kMaxCount)
      throw SchemaError(keyword, child(pointer, keyword),
                        "values above " + std::to_string(kMaxCount) + " are not supported");
    return static_cast<int64_t>(number);
  }

  Expr string(const json::object& object, const std::string& pointer) {
    std::optional<int64_t> min = count(object, pointer, "minLength");
    std::optional<int64_t> max = count(object, pointer, "maxLength");
    const json::value* pattern = object.if_contains("pattern");
    const json::value* format = object.if_contains("format");
    Expr quote = b_.literal("\"");
    if (pattern != nullptr || format != nullptr) {
      const char* keyword = pattern != nullptr ? "pattern" : "format";
      const json::value& value = *(pattern != nullptr ? pattern : format);
      std::string at = child(pointer, keyword);
      for (const char* other : {"minLength", "maxLength", "format"}) {
        if (object.contains(other) && std::string_view(other) != keyword)
          throw SchemaError(other, child(pointer, other),
                            std::string("cannot be combined with '") + keyword + "'");
      }
      if (!value.is_string()) throw SchemaError(keyword, at, "must be a string");
      std::string regex(value.get_string());
      if (format != nullptr && pattern == nullptr) {
        auto known = kFormats.find(regex);
        if (known == kFormats.end())
          throw SchemaError("format", at, "format '" + regex + "' is not supported");
        regex = known->second;
      }
      try {
        return b_.sequence(
            {quote, compile_regex(b_, regex, RegexText::json_string, pattern != nullptr), quote});
      } catch (const SchemaError& error) {
        throw SchemaError(keyword, at, error.detail());
      }
    }
    if (!min && !max) return json_.string();
    if (min && max && *min > *max)
      throw SchemaError("minLength", child(pointer, "minLength"), "is above maxLength");
    return b_.sequence({quote,
                        b_.repeat(json_.string_char(), static_cast<int>(min.value_or(0)),
                                  max ? static_cast<int>(*max) : -1),
                        quote});
  }

  struct Bound {
    double value;
    bool exclusive;
    const char* keyword;
  };

  static std::optional<Bound> bound(const json::object& object, const std::string& pointer,
                                    bool lower) {
    std::optional<Bound> result;
    static constexpr const char* kLower[] = {"minimum", "exclusiveMinimum"};
    static constexpr const char* kUpper[] = {"maximum", "exclusiveMaximum"};
    for (const char* keyword : lower ? kLower : kUpper) {
      const json::value* value = object.if_contains(keyword);
      if (value == nullptr) continue;
      if (!value->is_number())
        throw SchemaError(keyword, child(pointer, keyword),
                          "must be a number (the draft-4 boolean form is not supported)");
      Bound candidate{value->to_number<double>(), keyword[0] == 'e', keyword};
      bool stricter = !result ||
                      (lower ? candidate.value > result->value : candidate.value < result->value) ||
                      (candidate.value == result->value && candidate.exclusive);
      if (stricter) result = candidate;
    }
    return result;
  }

  Expr integer(const json::object& object, const std::string& pointer) {
    std::optional<Bound> lower = bound(object, pointer, true);
    std::optional<Bound> upper = bound(object, pointer, false);
    if (!lower && !upper) return json_.integer();
    double low = -static_cast<double>(kMaxMagnitude);
    double high = static_cast<double>(kMaxMagnitude);
    if (lower)
      low =
          std::max(low, lower->exclusive ? std::floor(lower->value) + 1 : std::ceil(lower->value));
    if (upper)
      high =
          std::min(high, upper->exclusive ? std::ceil(upper->value) - 1 : std::floor(upper->value));
    if (low > high) {
      const Bound& culprit = lower ? *lower : *upper;
      throw SchemaError(culprit.keyword, child(pointer, culprit.keyword),
                        "no integer lies within the bounds (of up to 16 digits)");
    }
    return integer_range(b_, static_cast<int64_t>(low), static_cast<int64_t>(high));
  }

  Expr number(const json::object& object, const std::string& pointer) {
    std::optional<Bound> lower = bound(object, pointer, true);
    std::optional<Bound> upper = bound(object, pointer, false);
    if (!lower && !upper) return json_.number();
    NumberBounds bounds;
    for (const std::optional<Bound>* side : {&lower, &upper}) {
      if (!*side) continue;
      const Bound& b = **side;
      if (std::trunc(b.value) != b.value || std::fabs(b.value) > 1e15)
        throw SchemaError(b.keyword, child(pointer, b.keyword),
                          "only integer bounds (up to 10^15) can be enforced on numbers");
      if (side == &lower) {
        bounds.lower = static_cast<int64_t>(b.value);
        bounds.lower_exclusive = b.exclusive;
      } else {
        bounds.upper = static_cast<int64_t>(b.value);
        bounds.upper_exclusive = b.exclusive;
      }
    }
    if (lower && upper &&
        (lower->value > upper->value ||
         (lower->value == upper->value && (lower->exclusive || upper->exclusive))))
      throw SchemaError(lower->keyword, child(pointer, lower->keyword),
                        "no number lies within the bounds");
    return bounded_number(b_, bounds);
  }

  Expr object(const json::object& object, const std::string& pointer, int depth) {
    ++progress_;
    struct Property {
      std::string name;
      Expr value;
      bool required;
    };
    std::vector<Property> properties;
    std::optional<Expr> extra;  // the value of other keys, if allowed
    if (const json::value* additional = object.if_contains("additionalProperties")) {
      std::string at = child(pointer, "additionalProperties");
      if (!additional->is_bool() && !additional->is_object())
        throw SchemaError("additionalProperties", at, "must be a schema");
      if (!(additional->is_bool() && !additional->get_bool()))
        extra = compile(*additional, at, depth + 1);
    }
    if (const json::value* declared = object.if_contains("properties")) {
      std::string at = child(pointer, "properties");
      if (!declared->is_object())
        throw SchemaError("properties", at, "must be an object of schemas");
      for (const auto& entry : declared->get_object())
        properties.push_back({std::string(entry.key()),
                              compile(entry.value(), child(at, entry.key()), depth + 1), false});
    }
    if (const json::value* required = object.if_contains("required")) {
      std::string at = child(pointer, "required");
      if (!required->is_array()) throw SchemaError("required", at, "must be an array of names");
      for (const json::value& name : required->get_array()) {
        if (!name.is_string()) throw SchemaError("required", at, "must be an array of names");
        auto it = std::find_if(properties.begin(), properties.end(),
                               [&](const Property& p) { return p.name == name.get_string(); });
        if (it != properties.end()) {
          it->required = true;
          continue;
        }
        if (const json::value* additional = object.if_contains("additionalProperties");
            additional != nullptr && additional->is_bool() && !additional->get_bool())
          throw SchemaError("required", at,
                            "names '" + std::string(name.get_string()) +
                                "', which additionalProperties: false forbids");
        properties.push_back(
            {std::string(name.get_string()), extra ? *extra : json_.any_value(), true});
      }
    }
    --progress_;
    return object_text(properties, extra);
  }

  template <typename Property>
  Expr object_text(const std::vector<Property>& properties, std::optional<Expr> extra) {
    Expr separator = json_.separator();
    auto member = [&](Expr key, Expr value) {
      return b_.sequence({key, json_.space(), b_.literal(":"), json_.space(), value});
    };
    std::optional<Expr> extra_member;
    if (extra) extra_member = member(json_.string(), *extra);
    size_t n = properties.size();
    // after[i]: members from i on once one has been written (each after a comma);
    // first[i]: a non-empty list of members from i on, when none has been written yet.
    std::vector<Expr> after(n + 1);
    std::vector<std::optional<Expr>> first(n + 1);
    after[n] =
        extra_member ? b_.repeat(b_.sequence({separator, *extra_member}), 0, -1) : b_.empty();
    if (extra_member) first[n] = b_.sequence({*extra_member, after[n]});
    for (size_t i = n; i-- > 0;) {
      Expr key = b_.literal(json::serialize(json::string(properties[i].name)));
      Expr here = member(key, properties[i].value);
      Expr with = b_.sequence({separator, here, after[i + 1]});
      after[i] = properties[i].required ? with : b_.choice({with, after[i + 1]});
      Expr starting = b_.sequence({here, after[i + 1]});
      if (properties[i].required || !first[i + 1])
        first[i] = starting;
      else
        first[i] = b_.choice({starting, *first[i + 1]});
    }
    bool any_required = std::any_of(properties.begin(), properties.end(),
                                    [](const Property& p) { return p.required; });
    Expr open = b_.sequence({b_.literal("{"), json_.space()});
    Expr close = b_.literal("}");
    if (!first[0]) return b_.sequence({open, close});
    Expr members = b_.sequence({*first[0], json_.space()});
    if (any_required) return b_.sequence({open, members, close});
    return b_.sequence({open, b_.repeat(members, 0, 1), close});
  }

  Expr array(const json::object& object, const std::string& pointer, int depth) {
    ++progress_;
    std::optional<int64_t> min = count(object, pointer, "minItems");
    std::optional<int64_t> max = count(object, pointer, "maxItems");
    if (min && max && *min > *max)
      throw SchemaError("minItems", child(pointer, "minItems"), "is above maxItems");
    std::vector<Expr> prefix;
    if (const json::value* items = object.if_contains("prefixItems")) {
      std::string at = child(pointer, "prefixItems");
      if (!items->is_array()) throw SchemaError("prefixItems", at, "must be an array of schemas");
      for (size_t i = 0; i < items->get_array().size(); ++i)
        prefix.push_back(compile(items->get_array()[i], child(at, std::to_string(i)), depth + 1));
    }
    std::optional<Expr> item = json_.any_value();
    if (const json::value* items = object.if_contains("items")) {
      std::string at = child(pointer, "items");
      if (items->is_array())
        throw SchemaError("items", at, "the array form is draft-4's; use prefixItems");
      if (items->is_bool() && !items->get_bool())
        item.reset();
      else
        item = compile(*items, at, depth + 1);
    }
    --progress_;
    int64_t low = min.value_or(0);
    int64_t high = max.value_or(-1);
    int64_t k = static_cast<int64_t>(prefix.size());
    if (!item) high = high < 0 ? k : std::min(high, k);
    if (low > high && high >= 0)
      throw SchemaError("minItems", child(pointer, "minItems"),
                        "more items than prefixItems allows when items is false");
    Expr separator = json_.separator();
    // tail(i): the items from index i on, once i >= 1 have been written.
    std::function<Expr(int64_t)> tail = [&](int64_t i) -> Expr {
      if (high >= 0 && i >= high) return b_.empty();
      if (i >= k) {
        int repeat_min = static_cast<int>(std::max<int64_t>(0, low - i));
        int repeat_max = high < 0 ? -1 : static_cast<int>(high - i);
        return b_.repeat(b_.sequence({separator, *item}), repeat_min, repeat_max);
      }
      Expr next = b_.sequence({separator, prefix[i], tail(i + 1)});
      return i < low ? next : b_.choice({next, b_.empty()});
    };
    Expr open = b_.sequence({b_.literal("["), json_.space()});
    Expr close = b_.literal("]");
    if (high == 0) return b_.sequence({open, close});
    Expr first = k > 0 ? prefix[0] : *item;
    Expr items = b_.sequence({first, tail(1), json_.space()});
    if (low >= 1) return b_.sequence({open, items, close});
    return b_.sequence({open, b_.repeat(items, 0, 1), close});
  }

  Expr reference(const json::value& ref, const std::string& pointer, int depth) {
    if (!ref.is_string()) throw SchemaError("$ref", pointer, "must be a string");
    std::string target(ref.get_string());
    if (target.empty() || target[0] != '#')
      throw SchemaError("$ref", pointer,
                        "'" + target + "': only references inside the schema (#...) are supported");
    std::string target_pointer = target.substr(1);
    if (auto progress = in_progress_.find(target_pointer);
        progress != in_progress_.end() && progress->second == progress_)
      throw SchemaError("$ref", pointer,
                        "'" + target + "' refers back to itself without any JSON text in between");
    if (auto known = rules_.find(target_pointer); known != rules_.end()) return known->second;
    boost::system::error_code error;
    const json::value* resolved = root_.find_pointer(target_pointer, error);
    if (resolved == nullptr)
      throw SchemaError("$ref", pointer, "'" + target + "' does not resolve in this schema");
    Expr rule = b_.rule();
    rules_.emplace(target_pointer, rule);
    in_progress_[target_pointer] = progress_;
    Expr body = compile(*resolved, target_pointer, depth + 1);
    in_progress_.erase(target_pointer);
    b_.define(rule, body);
    return rule;
  }

  JsonGrammar& json_;
  GrammarBuilder& b_;
  const json::value& root_;
  std::map<std::string, Expr> rules_;       // $ref target -> its rule
  std::map<std::string, int> in_progress_;  // targets being compiled -> progress_ then
  int progress_ = 0;                        // enclosing object and array bodies
};

}  // namespace

Expr JsonGrammar::schema(const boost::json::value& schema) {
  SchemaCompiler compiler(*this, schema);
  if (schema.is_bool() && !schema.get_bool())
    throw SchemaError("false", "", "the schema false accepts nothing");
  return compiler.compile(schema, "", 0);
}

}  // namespace chatflow::grammar
