#include "framework/text/jinja/interpreter.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "framework/text/jinja/globals.h"

namespace chatflow::jinja {
namespace {

constexpr int kMaxMacroDepth = 200;

// The `loop` variable of a for block.
class LoopObject final : public Object {
 public:
  LoopObject(const std::vector<Value>& items, int depth, std::function<Value(Arguments&)> recurse)
      : items_(items), depth_(depth), recurse_(std::move(recurse)) {}
  // loop(children) in a recursive for: the body again over `children`, one level deeper.
  std::optional<Value> call(Arguments& arguments) override {
    if (!recurse_) return std::nullopt;
    return recurse_(arguments);
  }
  std::string_view type_name() const override { return "LoopContext"; }
  std::optional<Value> attribute(std::string_view name) const override {
    auto length = static_cast<int64_t>(items_.size());
    auto index = static_cast<int64_t>(index_);
    if (name == "index") return Value(index + 1);
    if (name == "index0") return Value(index);
    if (name == "revindex") return Value(length - index);
    if (name == "revindex0") return Value(length - index - 1);
    if (name == "first") return Value(index == 0);
    if (name == "last") return Value(index == length - 1);
    if (name == "length") return Value(length);
    if (name == "depth") return Value(depth_);
    if (name == "depth0") return Value(depth_ - 1);
    if (name == "previtem")
      return index > 0 ? items_[index_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return index + 1 < length ? items_[index_ + 1] : Value::undefined("there is no next item");
    if (name == "changed") {
      auto last = last_changed_;
      return Value(Callable{"changed", [last](Arguments& arguments) -> Value {
                              Value current(List{arguments.positional, true, {}, {}});
                              if (*last && equal(**last, current)) return Value(false);
                              *last = current;
                              return Value(true);
                            }});
    }
    if (name == "cycle") {
      size_t position = index_;
      return Value(Callable{"cycle", [position](Arguments& arguments) -> Value {
                              if (arguments.positional.empty())
                                raise_type_error("no items for cycling given");
                              return arguments.positional[position % arguments.positional.size()];
                            }});
    }
    return std::nullopt;
  }
  void set_index(size_t index) { index_ = index; }

 private:
  const std::vector<Value>& items_;
  int depth_;
  std::function<Value(Arguments&)> recurse_;  // empty unless the loop is recursive
  size_t index_ = 0;
  // loop.changed(...)'s memory of the previous call's arguments.
  std::shared_ptr<std::optional<Value>> last_changed_ = std::make_shared<std::optional<Value>>();
};

}  // namespace

Interpreter::Interpreter(const Dict& variables, const Environment& environment)
    : variables_(variables), environment_(environment) {
  frames_.push_back({{}, 0});
}

TrackedString Interpreter::render(const Body& body) {
  RenderBudget budget(environment_.limits);
  budget_ = &budget;
  TrackedString output;
  output_ = &output;
  try {
    execute(body);
  } catch (const RenderError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& error) {
    // A library call that refused a value (a number out of range, say) is Python's ValueError.
    throw RenderError(RenderError::Kind::value, error.what());
  }
  output_ = nullptr;
  return output;
}

Value Interpreter::lookup(const std::string& name) const {
  size_t index = current_;
  while (true) {
    const Frame& frame = frames_[index];
    for (auto it = frame.variables.rbegin(); it != frame.variables.rend(); ++it) {
      if (it->first == name) return it->second;
    }
    if (frame.parent == index) break;
    index = frame.parent;
  }
  if (const Value* value = variables_.find(std::string_view(name))) return *value;
  if (auto global = find_global(name, environment_)) return *global;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value value) {
  auto& variables = frames_[current_].variables;
  for (auto& entry : variables) {
    if (entry.first == name) {
      entry.second = std::move(value);
      return;
    }
  }
  variables.emplace_back(name, std::move(value));
}

void Interpreter::assign_target(const AssignTarget& target, const Value& value) {
  if (!target.attribute.empty()) {
    Value object = lookup(target.names[0]);
    if (!object.is_object() || !object.as_object().set_attribute(target.attribute, value)) {
      throw RenderError(RenderError::Kind::template_error,
                        "cannot assign attribute on non-namespace object");
    }
    return;
  }
  if (!target.unpack) {
    assign(target.names[0], value);
    return;
  }
  std::vector<Value> items = iterate(value);
  if (items.size() != target.names.size()) {
    throw RenderError(
        RenderError::Kind::value,
        items.size() < target.names.size()
            ? "not enough values to unpack (expected " + std::to_string(target.names.size()) +
                  ", got " + std::to_string(items.size()) + ")"
            : "too many values to unpack (expected " + std::to_string(target.names.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i)
    assign(target.names[i], items[i]);
}

size_t Interpreter::push_frame(size_t parent) {
  size_t previous = current_;
  frames_.push_back({{}, std::min(parent, frames_.size() - 1)});
  current_ = frames_.size() - 1;
  return previous;
}

void Interpreter::pop_frame() {
  frames_.pop_back();
}

Interpreter::Flow Interpreter::execute(const Body& body) {
  for (const auto& statement : body) {
    Flow flow = execute(*statement);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

TrackedString Interpreter::capture(const Body& body) {
  TrackedString buffer;
  TrackedString* outer = output_;
  output_ = &buffer;
  try {
    execute(body);
  } catch (...) {
    output_ = outer;
    throw;
  }
  output_ = outer;
  return buffer;
}

Value Interpreter::apply_filters(const std::vector<std::unique_ptr<FilterExpression>>& filters,
                                 Value value) {
  for (const auto& filter : filters) {
    Arguments arguments = evaluate_arguments(filter->arguments);
    value = filter->function(value, arguments);
  }
  return value;
}

void Interpreter::execute_if(const IfStatement& statement, Flow& flow) {
  for (const auto& [condition, body] : statement.branches) {
    if (truthy(evaluate(*condition))) {
      flow = execute(body);
      return;
    }
  }
  flow = execute(statement.otherwise);
}

Interpreter::Flow Interpreter::execute_for(const ForStatement& statement) {
  return run_loop(statement, evaluate(*statement.iterable), 1);
}

Interpreter::Flow Interpreter::run_loop(const ForStatement& statement, const Value& iterable,
                                        int depth) {
  std::vector<Value> items = iterate(iterable);
  size_t outer = push_frame(current_);
  if (statement.condition) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      assign_target(statement.target, item);
      if (truthy(evaluate(*statement.condition))) kept.push_back(item);
    }
    items = std::move(kept);
    frames_[current_].variables.clear();
  }
  if (items.empty()) {
    pop_frame();
    current_ = outer;
    return execute(statement.otherwise);
  }
  std::function<Value(Arguments&)> recurse;
  if (statement.recursive) {
    recurse = [this, &statement, depth](Arguments& arguments) -> Value {
      if (arguments.positional.size() != 1) raise_type_error("loop() takes exactly one argument");
      if (depth >= kMaxMacroDepth)
        throw RenderError(RenderError::Kind::template_error,
                          "maximum loop recursion depth exceeded");
      TrackedString buffer;
      TrackedString* outer_output = output_;
      output_ = &buffer;
      run_loop(statement, arguments.positional[0], depth + 1);
      output_ = outer_output;
      return Value(std::move(buffer));
    };
  }
  auto loop = std::make_shared<LoopObject>(items, depth, std::move(recurse));
  Value loop_value(std::static_pointer_cast<Object>(loop));
  // An exception ends the whole render, so frames need no unwinding on the way out.
  for (size_t i = 0; i < items.size(); ++i) {
    budget_->step();  // an empty body is a step too
    loop->set_index(i);
    assign("loop", loop_value);
    assign_target(statement.target, items[i]);
    if (execute(statement.body) == Flow::break_loop) break;
  }
  pop_frame();
  current_ = outer;
  return Flow::normal;
}

Interpreter::Flow Interpreter::execute(const Statement& statement) {
  RenderBudget::Level level(*budget_);
  switch (statement.kind) {
    case StatementKind::text:
      output_->append(static_cast<const TextStatement&>(statement).text);
      return Flow::normal;
    case StatementKind::print: {
      Value value = evaluate(*static_cast<const PrintStatement&>(statement).expression);
      if (value.is_string()) {
        output_->append(value.as_tracked());
      } else if (!value.is_undefined()) {
        output_->append(to_text(value), false);
      }
      return Flow::normal;
    }
    case StatementKind::if_: {
      Flow flow = Flow::normal;
      execute_if(static_cast<const IfStatement&>(statement), flow);
      return flow;
    }
    case StatementKind::for_:
      return execute_for(static_cast<const ForStatement&>(statement));
    case StatementKind::set: {
      const auto& set = static_cast<const SetStatement&>(statement);
      assign_target(set.target, evaluate(*set.value));
      return Flow::normal;
    }
    case StatementKind::set_block: {
      const auto& set = static_cast<const SetBlockStatement&>(statement);
      assign_target(set.target, apply_filters(set.filters, Value(capture(set.body))));
      return Flow::normal;
    }
    case StatementKind::macro: {
      const auto& macro = static_cast<const MacroStatement&>(statement);
      assign(macro.name, make_macro(macro.name, macro.parameters, macro.body, current_, &macro));
      return Flow::normal;
    }
    case StatementKind::call_block: {
      const auto& block = static_cast<const CallBlockStatement&>(statement);
      Value caller = make_macro("caller", block.caller_parameters, block.body, current_, nullptr);
      Value callee = evaluate(*block.call->callee);
      Arguments arguments = evaluate_arguments(block.call->arguments);
      arguments.keyword.emplace_back("caller", caller);
      Value result = call(callee, arguments);
      output_->append(to_tracked(result));
      return Flow::normal;
    }
    case StatementKind::filter_block: {
      const auto& block = static_cast<const FilterBlockStatement&>(statement);
      output_->append(to_tracked(apply_filters(block.filters, Value(capture(block.body)))));
      return Flow::normal;
    }
    case StatementKind::break_:
      return Flow::break_loop;
    case StatementKind::continue_:
      return Flow::continue_loop;
    case StatementKind::scope: {
      const auto& scope = static_cast<const ScopeStatement&>(statement);
      std::vector<std::pair<std::string, Value>> values;
      for (const auto& [name, expression] : scope.assignments)
        values.emplace_back(name, evaluate(*expression));
      size_t outer = push_frame(current_);
      for (auto& [name, value] : values)
        assign(name, std::move(value));
      Flow flow = execute(scope.body);
      pop_frame();
      current_ = outer;
      return flow;
    }
  }
  return Flow::normal;
}

Value Interpreter::make_macro(const std::string& name,
                              const std::vector<MacroParameter>& parameters, const Body& body,
                              size_t defining_frame, const MacroStatement* macro) {
  return Value(
      Callable{name, [this, &parameters, &body, defining_frame, macro](Arguments& arguments) {
                 return call_macro(parameters, body, defining_frame, macro, arguments);
               }});
}

Value Interpreter::call_macro(const std::vector<MacroParameter>& parameters, const Body& body,
                              size_t defining_frame, const MacroStatement* macro,
                              Arguments& arguments) {
  if (macro && !macro->uses_varargs && arguments.positional.size() > parameters.size()) {
    raise_type_error("macro '" + macro->name + "' takes not more than " +
                     std::to_string(parameters.size()) + " argument(s)");
  }
  if (macro && !macro->uses_kwargs) {
    for (const auto& [key, value] : arguments.keyword) {
      bool known = key == "caller" && macro->uses_caller;
      for (const auto& parameter : parameters)
        known = known || parameter.name == key;
      if (!known)
        raise_type_error("macro '" + macro->name + "' takes no keyword argument '" + key + "'");
    }
  }
  if (++depth_ > kMaxMacroDepth) {
    --depth_;
    throw RenderError(RenderError::Kind::template_error, "maximum macro recursion depth exceeded");
  }
  size_t outer = push_frame(defining_frame);
  size_t base_frames = frames_.size();
  try {
    std::vector<Value> extra_positional;
    for (size_t i = 0; i < arguments.positional.size(); ++i) {
      if (i < parameters.size()) {
        assign(parameters[i].name, arguments.positional[i]);
      } else {
        extra_positional.push_back(arguments.positional[i]);
      }
    }
    Dict extra_keyword;
    for (auto& [key, value] : arguments.keyword) {
      bool known = key == "caller";
      for (const auto& parameter : parameters)
        known = known || parameter.name == key;
      if (known) {
        assign(key, value);
      } else {
        extra_keyword.set(Value::data_string(key), value);
      }
    }
    for (size_t i = arguments.positional.size(); i < parameters.size(); ++i) {
      bool given = false;
      for (auto& [key, value] : arguments.keyword)
        given = given || key == parameters[i].name;
      if (given) continue;
      assign(parameters[i].name,
             parameters[i].default_value
                 ? evaluate(*parameters[i].default_value)
                 : Value::undefined("parameter '" + parameters[i].name + "' was not provided"));
    }
    assign("varargs", Value(List{std::move(extra_positional), true, {}, {}}));
    assign("kwargs", Value(std::move(extra_keyword)));
    TrackedString text = capture(body);
    frames_.resize(base_frames);
    pop_frame();
    current_ = outer;
    --depth_;
    return Value(std::move(text));
  } catch (...) {
    frames_.resize(base_frames);
    pop_frame();
    current_ = outer;
    --depth_;
    throw;
  }
}

Arguments Interpreter::evaluate_arguments(const CallArguments& arguments) {
  Arguments values;
  values.positional.reserve(arguments.positional.size());
  for (const auto& argument : arguments.positional)
    values.positional.push_back(evaluate(*argument));
  for (const auto& [name, argument] : arguments.keyword)
    values.keyword.emplace_back(name, evaluate(*argument));
  return values;
}

Value Interpreter::call(const Value& callee, Arguments& arguments) {
  if (callee.is_callable()) return callee.as_callable().function(arguments);
  if (callee.is_object()) {
    if (auto result = callee.as_object().call(arguments)) return *result;
  }
  if (callee.is_undefined()) raise_undefined(callee);
  raise_type_error("'" + type_name(callee) + "' object is not callable");
}

Value Interpreter::evaluate_binary(const BinaryExpression& expression) {
  if (expression.op == BinaryOperator::logical_and) {
    Value left = evaluate(*expression.left);
    return truthy(left) ? evaluate(*expression.right) : left;
  }
  if (expression.op == BinaryOperator::logical_or) {
    Value left = evaluate(*expression.left);
    return truthy(left) ? left : evaluate(*expression.right);
  }
  Value left = evaluate(*expression.left);
  Value right = evaluate(*expression.right);
  return binary_operation(expression.op, left, right);
}

Value Interpreter::evaluate_compare(const CompareExpression& expression) {
  Value left = evaluate(*expression.first);
  for (const auto& [op, operand] : expression.rest) {
    Value right = evaluate(*operand);
    bool result = false;
    switch (op) {
      case CompareOperator::equal:
        result = equal(left, right);
        break;
      case CompareOperator::not_equal:
        result = !equal(left, right);
        break;
      case CompareOperator::less:
        result = compare(left, right) < 0;
        break;
      case CompareOperator::less_equal:
        result = compare(left, right) <= 0;
        break;
      case CompareOperator::greater:
        result = compare(left, right) > 0;
        break;
      case CompareOperator::greater_equal:
        result = compare(left, right) >= 0;
        break;
      case CompareOperator::in:
        result = contains(right, left);
        break;
      case CompareOperator::not_in:
        result = !contains(right, left);
        break;
    }
    if (!result) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::evaluate(const Expression& expression) {
  RenderBudget::Level level(*budget_);
  switch (expression.kind) {
    case ExpressionKind::literal:
      return static_cast<const LiteralExpression&>(expression).value;
    case ExpressionKind::name:
      return lookup(static_cast<const NameExpression&>(expression).name);
    case ExpressionKind::list: {
      const auto& list = static_cast<const ListExpression&>(expression);
      List value;
      value.tuple = list.tuple;
      value.items.reserve(list.items.size());
      for (const auto& item : list.items)
        value.items.push_back(evaluate(*item));
      return Value(std::move(value));
    }
    case ExpressionKind::dict: {
      Dict value;
      for (const auto& [key, item] : static_cast<const DictExpression&>(expression).entries) {
        Value key_value = evaluate(*key);
        value.set(std::move(key_value), evaluate(*item));
      }
      return Value(std::move(value));
    }
    case ExpressionKind::attribute: {
      const auto& attribute = static_cast<const AttributeExpression&>(expression);
      return get_attribute(evaluate(*attribute.object), attribute.name);
    }
    case ExpressionKind::subscript: {
      const auto& subscript = static_cast<const SubscriptExpression&>(expression);
      Value object = evaluate(*subscript.object);
      return get_item(object, evaluate(*subscript.index));
    }
    case ExpressionKind::slice: {
      const auto& slice = static_cast<const SliceExpression&>(expression);
      Value object = evaluate(*slice.object);
      Value start = slice.start ? evaluate(*slice.start) : Value(None{});
      Value stop = slice.stop ? evaluate(*slice.stop) : Value(None{});
      Value step = slice.step ? evaluate(*slice.step) : Value(None{});
      return slice_value(object, start, stop, step);
    }
    case ExpressionKind::call: {
      const auto& call_expression = static_cast<const CallExpression&>(expression);
      Value callee = evaluate(*call_expression.callee);
      Arguments arguments = evaluate_arguments(call_expression.arguments);
      return call(callee, arguments);
    }
    case ExpressionKind::filter: {
      const auto& filter = static_cast<const FilterExpression&>(expression);
      Value operand = evaluate(*filter.operand);
      Arguments arguments = evaluate_arguments(filter.arguments);
      return filter.function(operand, arguments);
    }
    case ExpressionKind::test: {
      const auto& test = static_cast<const TestExpression&>(expression);
      Value operand = evaluate(*test.operand);
      Arguments arguments = evaluate_arguments(test.arguments);
      return Value(test.function(operand, arguments) != test.negated);
    }
    case ExpressionKind::unary: {
      const auto& unary = static_cast<const UnaryExpression&>(expression);
      Value operand = evaluate(*unary.operand);
      if (unary.op == UnaryOperator::logical_not) return Value(!truthy(operand));
      if (operand.is_undefined()) raise_undefined(operand);
      if (operand.is_int())
        return Value(unary.op == UnaryOperator::negate ? -operand.as_int() : operand.as_int());
      if (operand.is_bool())
        return Value(int64_t{unary.op == UnaryOperator::negate ? -int64_t{operand.as_bool()}
                                                               : int64_t{operand.as_bool()}});
      if (operand.is_float())
        return Value(unary.op == UnaryOperator::negate ? -operand.as_float() : operand.as_float());
      raise_type_error("bad operand type for unary " +
                       std::string(unary.op == UnaryOperator::negate ? "-" : "+") + ": '" +
                       type_name(operand) + "'");
    }
    case ExpressionKind::binary:
      return evaluate_binary(static_cast<const BinaryExpression&>(expression));
    case ExpressionKind::compare:
      return evaluate_compare(static_cast<const CompareExpression&>(expression));
    case ExpressionKind::conditional: {
      const auto& conditional = static_cast<const ConditionalExpression&>(expression);
      if (truthy(evaluate(*conditional.condition))) return evaluate(*conditional.then);
      if (conditional.otherwise) return evaluate(*conditional.otherwise);
      return Value::undefined("the inline if-expression on line " +
                              std::to_string(conditional.position.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Value();
}

}  // namespace chatflow::jinja
