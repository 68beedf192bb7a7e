// The tests of `x is name`: jinja2's built-in tests.
#include <string_view>
#include <utility>

#include "framework/text/jinja/builtins.h"
#include "framework/text/jinja/interpreter.h"
#include "framework/text/jinja/string_functions.h"

namespace chatflow::jinja {
namespace {

const Value& argument(const Arguments& arguments, std::string_view test) {
  const Value* value = arguments.find(0, "");
  if (!value) raise_type_error("test '" + std::string(test) + "' requires an argument");
  return *value;
}

bool test_defined(const Value& v, const Arguments&) {
  return !v.is_undefined();
}
bool test_undefined(const Value& v, const Arguments&) {
  return v.is_undefined();
}
bool test_none(const Value& v, const Arguments&) {
  return v.is_none();
}
bool test_boolean(const Value& v, const Arguments&) {
  return v.is_bool();
}
bool test_true(const Value& v, const Arguments&) {
  return v.is_bool() && v.as_bool();
}
bool test_false(const Value& v, const Arguments&) {
  return v.is_bool() && !v.as_bool();
}
bool test_integer(const Value& v, const Arguments&) {
  return v.is_int();
}
bool test_float(const Value& v, const Arguments&) {
  return v.is_float();
}
bool test_number(const Value& v, const Arguments&) {
  return v.is_number();
}
bool test_string(const Value& v, const Arguments&) {
  return v.is_string();
}
bool test_mapping(const Value& v, const Arguments&) {
  return v.is_dict();
}
// Python's iter() accepts strings, lists, dicts, and jinja2's Undefined.
bool test_iterable(const Value& v, const Arguments&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool test_sequence(const Value& v, const Arguments&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
// Undefined defines __call__ (to raise), so Python's callable() is true for it.
bool test_callable(const Value& v, const Arguments&) {
  return v.is_callable() || v.is_undefined();
}
bool test_escaped(const Value&, const Arguments&) {
  return false;
}
// jinja2 computes these with Python's %, whatever the operand (for a string, % formats it).
bool test_odd(const Value& v, const Arguments&) {
  return equal(binary_operation(BinaryOperator::modulo, v, Value(2)), Value(1));
}
bool test_even(const Value& v, const Arguments&) {
  return equal(binary_operation(BinaryOperator::modulo, v, Value(2)), Value(0));
}
bool test_divisibleby(const Value& v, const Arguments& a) {
  return equal(binary_operation(BinaryOperator::modulo, v, argument(a, "divisibleby")), Value(0));
}
bool test_equal(const Value& v, const Arguments& a) {
  return equal(v, argument(a, "eq"));
}
bool test_not_equal(const Value& v, const Arguments& a) {
  return !equal(v, argument(a, "ne"));
}
bool test_less(const Value& v, const Arguments& a) {
  return compare(v, argument(a, "lt")) < 0;
}
bool test_less_equal(const Value& v, const Arguments& a) {
  return compare(v, argument(a, "le")) <= 0;
}
bool test_greater(const Value& v, const Arguments& a) {
  return compare(v, argument(a, "gt")) > 0;
}
bool test_greater_equal(const Value& v, const Arguments& a) {
  return compare(v, argument(a, "ge")) >= 0;
}
// Python's `is`: None, booleans and small values by value, containers by identity.
bool test_sameas(const Value& v, const Arguments& a) {
  const Value& other = argument(a, "sameas");
  if (v.data().index() != other.data().index()) return false;
  if (v.is_none() || v.is_undefined() || v.is_bool() || v.is_int() || v.is_float())
    return equal(v, other);
  if (v.is_string()) return &v.as_tracked() == &other.as_tracked();
  if (v.is_list()) return &v.as_list() == &other.as_list();
  if (v.is_dict()) return &v.as_dict() == &other.as_dict();
  if (v.is_callable()) return &v.as_callable() == &other.as_callable();
  return &v.as_object() == &other.as_object();
}
bool test_in(const Value& v, const Arguments& a) {
  return contains(argument(a, "in"), v);
}
bool test_lower(const Value& v, const Arguments&) {
  return is_lower(to_text(v));
}
bool test_upper(const Value& v, const Arguments&) {
  return is_upper(to_text(v));
}
bool test_filter(const Value& v, const Arguments&) {
  return v.is_string() && find_filter(v.as_string());
}
bool test_test(const Value& v, const Arguments&) {
  return v.is_string() && find_test(v.as_string());
}

}  // namespace

TestFunction find_test(std::string_view name) {
  static const std::pair<std::string_view, TestFunction> tests[] = {
      {"defined", test_defined},
      {"undefined", test_undefined},
      {"none", test_none},
      {"boolean", test_boolean},
      {"true", test_true},
      {"false", test_false},
      {"integer", test_integer},
      {"float", test_float},
      {"number", test_number},
      {"string", test_string},
      {"mapping", test_mapping},
      {"iterable", test_iterable},
      {"sequence", test_sequence},
      {"callable", test_callable},
      {"escaped", test_escaped},
      {"odd", test_odd},
      {"even", test_even},
      {"divisibleby", test_divisibleby},
      {"eq", test_equal},
      {"equalto", test_equal},
      {"==", test_equal},
      {"ne", test_not_equal},
      {"!=", test_not_equal},
      {"lt", test_less},
      {"lessthan", test_less},
      {"<", test_less},
      {"le", test_less_equal},
      {"<=", test_less_equal},
      {"gt", test_greater},
      {"greaterthan", test_greater},
      {">", test_greater},
      {"ge", test_greater_equal},
      {">=", test_greater_equal},
      {"sameas", test_sameas},
      {"in", test_in},
      {"lower", test_lower},
      {"upper", test_upper},
      {"filter", test_filter},
      {"test", test_test},
  };
  for (const auto& [test_name, function] : tests) {
    if (test_name == name) return function;
  }
  return nullptr;
}

}  // namespace chatflow::jinja
