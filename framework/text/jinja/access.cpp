// Attribute and item access, slicing, `in`, and the arithmetic operators, with Python's rules.
#include <cmath>
#include <cstdint>

#include "framework/text/jinja/interpreter.h"
#include "framework/text/jinja/methods.h"
#include "framework/text/jinja/render_budget.h"
#include "framework/text/jinja/string_format.h"
#include "framework/text/jinja/string_functions.h"

namespace chatflow::jinja {
namespace {

Value missing_attribute(const Value& object, std::string_view name) {
  return Value::undefined("'" + type_description(object) + "' has no attribute '" +
                          std::string(name) + "'");
}

std::optional<int64_t> as_index(const Value& value) {
  if (value.is_int()) return value.as_int();
  if (value.is_bool()) return value.as_bool() ? 1 : 0;
  return std::nullopt;
}

}  // namespace

Value get_attribute(const Value& object, std::string_view name) {
  if (object.is_undefined()) raise_undefined(object);
  if (object.is_object()) {
    if (auto value = object.as_object().attribute(name)) return *value;
    return missing_attribute(object, name);
  }
  if (auto method = find_method(object, name)) return *method;
  if (object.is_dict()) {
    if (const Value* value = object.as_dict().find(name)) return *value;
  }
  return missing_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) raise_undefined(object);
  if (object.is_dict()) {
    if (const Value* value = object.as_dict().find(key)) return *value;
  } else if (object.is_list() && object.as_list().iterator_type.empty()) {
    if (auto index = as_index(key)) {
      auto size = static_cast<int64_t>(object.as_list().items.size());
      int64_t position = *index < 0 ? *index + size : *index;
      if (position >= 0 && position < size)
        return object.as_list().items[static_cast<size_t>(position)];
    }
  } else if (object.is_string()) {
    if (auto index = as_index(key)) {
      auto offsets = code_point_offsets(object.as_string());
      auto size = static_cast<int64_t>(offsets.size() - 1);
      int64_t position = *index < 0 ? *index + size : *index;
      if (position >= 0 && position < size)
        return Value(object.as_tracked().slice(offsets[static_cast<size_t>(position)],
                                               offsets[static_cast<size_t>(position) + 1]));
    }
  }
  if (key.is_string()) {
    if (object.is_object()) {
      if (auto value = object.as_object().attribute(key.as_string())) return *value;
    } else if (auto method = find_method(object, key.as_string())) {
      return *method;
    }
    return missing_attribute(object, key.as_string());
  }
  return Value::undefined(type_description(object) + " has no element " + repr(key));
}

Value slice_value(const Value& object, const Value& start_value, const Value& stop_value,
                  const Value& step_value) {
  if (object.is_undefined()) raise_undefined(object);
  auto bound = [](const Value& value) -> std::optional<int64_t> {
    if (value.is_none()) return std::nullopt;
    if (auto index = as_index(value)) return index;
    if (value.is_undefined()) raise_undefined(value);
    raise_type_error("slice indices must be integers or None or have an __index__ method");
  };
  std::optional<int64_t> start = bound(start_value), stop = bound(stop_value),
                         step = bound(step_value);
  int64_t stride = step.value_or(1);
  if (stride == 0) throw RenderError(RenderError::Kind::value, "slice step cannot be zero");
  std::vector<size_t> offsets;
  int64_t size = 0;
  if (object.is_list() && object.as_list().iterator_type.empty()) {
    size = static_cast<int64_t>(object.as_list().items.size());
  } else if (object.is_string()) {
    offsets = code_point_offsets(object.as_string());
    size = static_cast<int64_t>(offsets.size() - 1);
  } else {
    // jinja2 compiles a slice to Python's own subscript, so a failed one raises.
    if (object.is_dict()) raise_type_error("unhashable type: 'slice'");
    raise_type_error("'" + type_name(object) + "' object is not subscriptable");
  }
  auto clamp = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t value = *index < 0 ? *index + size : *index;
    if (stride > 0) return std::clamp<int64_t>(value, 0, size);
    return std::clamp<int64_t>(value, -1, size - 1);
  };
  int64_t first = clamp(start, stride > 0 ? 0 : size - 1);
  int64_t last = clamp(stop, stride > 0 ? size : -1);
  if (object.is_list()) {
    List list;
    list.tuple = object.as_list().tuple;
    for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride)
      list.items.push_back(object.as_list().items[static_cast<size_t>(i)]);
    return Value(std::move(list));
  }
  const TrackedString& text = object.as_tracked();
  TrackedString out;
  if (stride == 1) {
    if (first < last)
      out = text.slice(offsets[static_cast<size_t>(first)], offsets[static_cast<size_t>(last)]);
    return Value(std::move(out));
  }
  for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride)
    out.append_slice(text, offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1]);
  return Value(std::move(out));
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;  // Undefined iterates as empty
  if (container.is_string()) {
    if (item.is_undefined()) raise_undefined(item);
    if (!item.is_string())
      raise_type_error("'in <string>' requires string as left operand, not " + type_name(item));
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    if (container.as_list().deferred_error) throw *container.as_list().deferred_error;
    for (const Value& element : container.as_list().items) {
      if (equal(element, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) return container.as_dict().find(item) != nullptr;
  raise_type_error("argument of type '" + type_name(container) + "' is not iterable");
}

namespace {

[[noreturn]] void unsupported(const char* symbol, const Value& left, const Value& right) {
  if (left.is_undefined()) raise_undefined(left);
  if (right.is_undefined()) raise_undefined(right);
  raise_type_error(std::string("unsupported operand type(s) for ") + symbol + ": '" +
                   type_name(left) + "' and '" + type_name(right) + "'");
}

int64_t integer_of(const Value& value) {
  return value.is_bool() ? int64_t{value.as_bool()} : value.as_int();
}

// The bytes `count` copies of `size` bytes take, saturating (checked against the render's
// budget before anything is built).
size_t repeated_bytes(size_t size, int64_t count) {
  if (count <= 0 || size == 0) return 0;
  auto copies = static_cast<size_t>(count);
  return size > SIZE_MAX / copies ? SIZE_MAX : size * copies;
}

Value repeat(const Value& sequence, int64_t times) {
  size_t unit = sequence.is_string() ? sequence.as_string().size()
                                     : sequence.as_list().items.size() * kItemBytes;
  RenderBudget::check_bytes(repeated_bytes(unit, times));
  if (unit == 0) times = 0;  // nothing to repeat however often: no loop of 10**12 empty copies
  if (sequence.is_string()) {
    TrackedString out;
    for (int64_t i = 0; i < times; ++i)
      out.append(sequence.as_tracked());
    return Value(std::move(out));
  }
  List list;
  list.tuple = sequence.as_list().tuple;
  for (int64_t i = 0; i < times; ++i)
    list.items.insert(list.items.end(), sequence.as_list().items.begin(),
                      sequence.as_list().items.end());
  return Value(std::move(list));
}

[[noreturn]] void division_by_zero(const char* what) {
  throw RenderError(RenderError::Kind::value, what);
}

}  // namespace

Value binary_operation(BinaryOperator op, const Value& left, const Value& right) {
  bool numbers = left.is_number() && right.is_number();
  bool integers = numbers && !left.is_float() && !right.is_float();
  switch (op) {
    case BinaryOperator::concat: {
      TrackedString out = to_tracked(left);
      out.append(to_tracked(right));
      return Value(std::move(out));
    }
    case BinaryOperator::add:
      if (integers) return Value(integer_of(left) + integer_of(right));
      if (numbers) return Value(left.as_number() + right.as_number());
      if (left.is_string() && right.is_string()) {
        // Markup + str escapes the str (either way round, as markupsafe does).
        bool markup = left.as_tracked().is_markup() || right.as_tracked().is_markup();
        TrackedString out = markup ? html_escape(left.as_tracked()) : left.as_tracked();
        out.append(markup ? html_escape(right.as_tracked()) : right.as_tracked());
        out.set_markup(markup);
        return Value(std::move(out));
      }
      if (left.is_list() && right.is_list() && left.as_list().tuple == right.as_list().tuple &&
          left.as_list().iterator_type.empty() && right.as_list().iterator_type.empty()) {
        List list = left.as_list();
        list.items.insert(list.items.end(), right.as_list().items.begin(),
                          right.as_list().items.end());
        return Value(std::move(list));
      }
      if (left.is_string() && !right.is_undefined())
        raise_type_error("can only concatenate str (not \"" + type_name(right) + "\") to str");
      if (left.is_list() && !right.is_undefined())
        raise_type_error("can only concatenate list (not \"" + type_name(right) + "\") to list");
      unsupported("+", left, right);
    case BinaryOperator::subtract:
      if (integers) return Value(integer_of(left) - integer_of(right));
      if (numbers) return Value(left.as_number() - right.as_number());
      unsupported("-", left, right);
    case BinaryOperator::multiply:
      if (integers) return Value(integer_of(left) * integer_of(right));
      if (numbers) return Value(left.as_number() * right.as_number());
      if ((left.is_string() || (left.is_list() && left.as_list().iterator_type.empty())) &&
          (right.is_int() || right.is_bool()))
        return repeat(left, integer_of(right));
      if ((right.is_string() || (right.is_list() && right.as_list().iterator_type.empty())) &&
          (left.is_int() || left.is_bool()))
        return repeat(right, integer_of(left));
      unsupported("*", left, right);
    case BinaryOperator::divide:
      if (!numbers) unsupported("/", left, right);
      if (right.as_number() == 0) division_by_zero("division by zero");
      return Value(left.as_number() / right.as_number());
    case BinaryOperator::floor_divide:
      if (!numbers) unsupported("//", left, right);
      if (right.as_number() == 0) division_by_zero("integer division or modulo by zero");
      if (integers) {
        int64_t a = integer_of(left), b = integer_of(right);
        int64_t quotient = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --quotient;
        return Value(quotient);
      }
      return Value(std::floor(left.as_number() / right.as_number()));
    case BinaryOperator::modulo:
      if (left.is_string()) return Value(percent_format(left.as_tracked(), right));
      if (!numbers) unsupported("%", left, right);
      if (right.as_number() == 0) division_by_zero("integer division or modulo by zero");
      if (integers) {
        int64_t a = integer_of(left), b = integer_of(right);
        int64_t remainder = a % b;
        if (remainder != 0 && ((remainder < 0) != (b < 0))) remainder += b;
        return Value(remainder);
      } else {
        double a = left.as_number(), b = right.as_number();
        double remainder = std::fmod(a, b);
        if (remainder != 0 && ((remainder < 0) != (b < 0))) remainder += b;
        return Value(remainder);
      }
    case BinaryOperator::power:
      if (integers && integer_of(right) >= 0) {
        // Squaring keeps huge exponents cheap; beyond 64 bits Python's big ints are not modelled.
        uint64_t result = 1, base = static_cast<uint64_t>(integer_of(left));
        for (int64_t exponent = integer_of(right); exponent > 0; exponent >>= 1) {
          if (exponent & 1) result *= base;
          base *= base;
        }
        return Value(static_cast<int64_t>(result));
      }
      if (numbers) {
        double base = left.as_number(), exponent = right.as_number();
        if (base == 0 && exponent < 0) division_by_zero("0.0 cannot be raised to a negative power");
        if (base < 0 && exponent != std::floor(exponent))
          raise_type_error(
              "a negative number to a fractional power is complex, which templates lack");
        return Value(std::pow(base, exponent));
      }
      unsupported("** or pow()", left, right);
    case BinaryOperator::logical_and:
    case BinaryOperator::logical_or:
      break;
  }
  return Value();
}

}  // namespace chatflow::jinja
