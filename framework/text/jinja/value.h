// The values a template computes with, modelled on the Python objects jinja2 sees: undefined,
// None, bools, ints, floats, strings, lists and tuples, dicts (insertion-ordered), callables and a
// few objects of the language itself (loop, namespace). Strings carry their provenance.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "framework/text/jinja/tracked_string.h"

namespace chatflow::jinja {

class Value;
class RenderError;

// jinja2's Undefined: prints as '', iterates as empty, is false; anything more raises `message`.
struct Undefined {
  std::shared_ptr<const std::string> message;  // null: the generic message
  bool unsafe = false;  // the sandbox refused an attribute: raising it is a SecurityError
};
struct None {};

struct List {
  std::vector<Value> items;
  bool tuple = false;
  // Python's lazy iterables (what map, select, items() return): "generator", "dict_items", ...
  // They iterate like lists but cannot be indexed or dumped as JSON.
  std::string iterator_type;
  // A generator whose body failed: the error surfaces when it is consumed, as in Python.
  std::shared_ptr<const RenderError> deferred_error;
  // Lists, dicts and namespaces within one another, this one included (set by Value(List)).
  int nesting = 1;
};

// A lazy iterable over `items`, as Python's `iterator_type` would be.
Value make_iterator(std::vector<Value> items, std::string iterator_type);
Value make_failing_generator(const RenderError& error);

struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces an existing key in place
  int nesting = 1;                   // as List::nesting (set by Value(Dict))
};

// Positional and keyword arguments of a call.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, else `fallback`.
  const Value* find(size_t index, std::string_view name) const;
  Value get(size_t index, std::string_view name, const Value& fallback) const;
};

struct Callable {
  std::string name;
  std::function<Value(Arguments&)> function;
};

// Objects of the language with attributes (loop, namespace, cycler, joiner).
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string_view type_name() const = 0;
  virtual std::optional<Value> attribute(std::string_view name) const = 0;
  // Only a namespace accepts attribute assignment.
  virtual bool set_attribute(std::string_view name, const Value& value);
  // Only a recursive loop's `loop` can be called; nullopt: not callable.
  virtual std::optional<Value> call(Arguments& arguments);
  // As List::nesting, for an object holding values (a namespace).
  virtual int nesting() const { return 1; }
  // Lets go of the values it holds, so references that loop back to it (a namespace holding
  // itself) are freed when the render ends.
  virtual void release_values() {}
};

class Value {
 public:
  using Data =
      std::variant<Undefined, None, bool, int64_t, double, std::shared_ptr<const TrackedString>,
                   std::shared_ptr<const List>, std::shared_ptr<const Dict>,
                   std::shared_ptr<const Callable>, std::shared_ptr<Object>>;

  Value() = default;
  Value(None) : data_(None{}) {}
  Value(bool b) : data_(b) {}
  Value(int64_t i) : data_(i) {}
  Value(int i) : data_(static_cast<int64_t>(i)) {}
  Value(double d) : data_(d) {}
  // These three are held to the render's budget (render_budget.h): size, and nesting.
  Value(TrackedString s);
  Value(List list);
  Value(Dict dict);
  Value(Callable callable) : data_(std::make_shared<const Callable>(std::move(callable))) {}
  Value(std::shared_ptr<Object> object) : data_(std::move(object)) {}
  Value(Undefined undefined) : data_(std::move(undefined)) {}

  static Value data_string(std::string text) {
    return Value(TrackedString::from_data(std::move(text)));
  }
  static Value template_string(std::string text) {
    return Value(TrackedString::from_template(std::move(text)));
  }
  static Value undefined(std::string message);

  bool is_undefined() const { return std::holds_alternative<Undefined>(data_); }
  bool is_none() const { return std::holds_alternative<None>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_float() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const {
    return std::holds_alternative<std::shared_ptr<const TrackedString>>(data_);
  }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(data_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const Dict>>(data_); }
  bool is_callable() const {
    return std::holds_alternative<std::shared_ptr<const Callable>>(data_);
  }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // ints and bools as Python's int() of them; floats as they are.
  double as_number() const;
  const TrackedString& as_tracked() const {
    return *std::get<std::shared_ptr<const TrackedString>>(data_);
  }
  const std::string& as_string() const { return as_tracked().text(); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  Object& as_object() const { return *std::get<std::shared_ptr<Object>>(data_); }
  const Undefined& as_undefined() const { return std::get<Undefined>(data_); }

  const Data& data() const { return data_; }

 private:
  Data data_;
};

// Raised when a template misbehaves at render time (jinja2's UndefinedError, TypeError,
// SecurityError, and raise_exception's TemplateError); `what()` is the message jinja2 gives.
class RenderError : public std::runtime_error {
 public:
  // limit: the render went over its RenderLimits (no jinja2 counterpart).
  enum class Kind { template_error, undefined, type, security, value, limit };
  RenderError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

[[noreturn]] void raise_type_error(const std::string& message);
// Raises the error an undefined value carries.
[[noreturn]] void raise_undefined(const Value& undefined);

// How deeply lists, dicts and namespaces nest in `value` (0 for anything else).
int nesting_of(const Value& value);

// Python semantics.
bool truthy(const Value& value);
bool equal(const Value& left, const Value& right);
// -1, 0, 1 for <, ==, >; raises TypeError like Python for unorderable types.
int compare(const Value& left, const Value& right);
// str(value): what {{ value }} prints. Undefined prints as ''.
std::string to_text(const Value& value);
// str(value) keeping a string's provenance (other values are data).
TrackedString to_tracked(const Value& value);
std::string repr(const Value& value);
std::string python_float_repr(double value);
// "dict object", "list object", "str object", "None", ... as jinja2 names types in messages.
std::string type_description(const Value& value);
// "dict", "list", "str", "NoneType", ... as Python's type(x).__name__.
std::string type_name(const Value& value);

// Number of code points (Python len of a str).
size_t code_point_count(std::string_view text);
// Byte offsets of every code point start, plus text.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view text);

// Items iterated by `for` (lists, dict keys, string characters); raises TypeError otherwise.
std::vector<Value> iterate(const Value& value);
// Python's len(); nullopt where len() raises.
std::optional<size_t> length(const Value& value);

}  // namespace chatflow::jinja
