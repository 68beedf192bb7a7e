// Runs a parsed template: jinja2's semantics in an immutable sandbox (no method mutates a list or
// dict), with transformers' globals raise_exception and strftime_now.
#pragma once

#include <ctime>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "framework/text/jinja/ast.h"
#include "framework/text/jinja/render_budget.h"

namespace chatflow::jinja {

struct Environment {
  // The local time strftime_now formats; empty: the system clock.
  std::function<std::tm()> now;
  // What one render may take (size, steps, time, nesting).
  RenderLimits limits;
};

class Interpreter {
 public:
  Interpreter(const Dict& variables, const Environment& environment);

  // Throws RenderError (kind limit past environment.limits).
  TrackedString render(const Body& body);

 private:
  enum class Flow { normal, break_loop, continue_loop };
  struct Frame {
    std::vector<std::pair<std::string, Value>> variables;
    size_t parent;  // index of the enclosing frame; the root's parent is itself
  };

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);
  void assign_target(const AssignTarget& target, const Value& value);
  size_t push_frame(size_t parent);
  void pop_frame();

  Flow execute(const Body& body);
  Flow execute(const Statement& statement);
  Flow execute_for(const ForStatement& statement);
  Flow run_loop(const ForStatement& statement, const Value& iterable, int depth);
  void execute_if(const IfStatement& statement, Flow& flow);
  TrackedString capture(const Body& body);
  Value apply_filters(const std::vector<std::unique_ptr<FilterExpression>>& filters, Value value);
  // `macro` null: a call block's caller, which takes any arguments.
  Value make_macro(const std::string& name, const std::vector<MacroParameter>& parameters,
                   const Body& body, size_t defining_frame, const MacroStatement* macro);
  Value call_macro(const std::vector<MacroParameter>& parameters, const Body& body,
                   size_t defining_frame, const MacroStatement* macro, Arguments& arguments);

  Value evaluate(const Expression& expression);
  Arguments evaluate_arguments(const CallArguments& arguments);
  Value evaluate_binary(const BinaryExpression& expression);
  Value evaluate_compare(const CompareExpression& expression);
  Value call(const Value& callee, Arguments& arguments);

  const Dict& variables_;
  const Environment& environment_;
  std::vector<Frame> frames_;
  size_t current_ = 0;
  TrackedString* output_ = nullptr;
  int depth_ = 0;                   // macro recursion guard
  RenderBudget* budget_ = nullptr;  // the running render's
};

// Python's obj.name and obj[key] as jinja2's sandbox performs them.
Value get_attribute(const Value& object, std::string_view name);
Value get_item(const Value& object, const Value& key);
// Python's slice of a list or str.
Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step);
// `item in container`.
bool contains(const Value& container, const Value& item);
Value binary_operation(BinaryOperator op, const Value& left, const Value& right);

}  // namespace chatflow::jinja
