// The parsed template: expressions and statements, each with where it began in the source.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/text/jinja/builtins.h"
#include "framework/text/jinja/syntax_error.h"
#include "framework/text/jinja/value.h"

namespace chatflow::jinja {

struct Expression;
struct Statement;
using ExpressionPtr = std::unique_ptr<Expression>;
using StatementPtr = std::unique_ptr<Statement>;
using Body = std::vector<StatementPtr>;

enum class ExpressionKind {
  literal,
  name,
  list,  // also tuples
  dict,
  attribute,
  subscript,
  slice,
  call,
  filter,
  test,
  unary,
  binary,
  compare,
  conditional,
};

struct Expression {
  explicit Expression(ExpressionKind kind, SourcePosition position)
      : kind(kind), position(position) {}
  virtual ~Expression() = default;
  ExpressionKind kind;
  SourcePosition position;
  // The longest path down to a leaf (a leaf is 1): evaluation recurses this deep, so the parser
  // refuses a tree deeper than its limit (a chain of 20,000 `~` is a syntax error, not a stack
  // overflow at the first render).
  int height = 1;
};

struct CallArguments {
  std::vector<ExpressionPtr> positional;
  std::vector<std::pair<std::string, ExpressionPtr>> keyword;
};

struct LiteralExpression : Expression {
  LiteralExpression(SourcePosition p, Value v)
      : Expression(ExpressionKind::literal, p), value(std::move(v)) {}
  Value value;
};

struct NameExpression : Expression {
  NameExpression(SourcePosition p, std::string n)
      : Expression(ExpressionKind::name, p), name(std::move(n)) {}
  std::string name;
};

struct ListExpression : Expression {
  ListExpression(SourcePosition p, bool is_tuple)
      : Expression(ExpressionKind::list, p), tuple(is_tuple) {}
  std::vector<ExpressionPtr> items;
  bool tuple;
};

struct DictExpression : Expression {
  explicit DictExpression(SourcePosition p) : Expression(ExpressionKind::dict, p) {}
  std::vector<std::pair<ExpressionPtr, ExpressionPtr>> entries;
};

struct AttributeExpression : Expression {
  AttributeExpression(SourcePosition p, ExpressionPtr o, std::string n)
      : Expression(ExpressionKind::attribute, p), object(std::move(o)), name(std::move(n)) {}
  ExpressionPtr object;
  std::string name;
};

struct SubscriptExpression : Expression {
  SubscriptExpression(SourcePosition p, ExpressionPtr o, ExpressionPtr i)
      : Expression(ExpressionKind::subscript, p), object(std::move(o)), index(std::move(i)) {}
  ExpressionPtr object;
  ExpressionPtr index;
};

struct SliceExpression : Expression {
  SliceExpression(SourcePosition p, ExpressionPtr o)
      : Expression(ExpressionKind::slice, p), object(std::move(o)) {}
  ExpressionPtr object;
  ExpressionPtr start, stop, step;  // each may be null
};

struct CallExpression : Expression {
  CallExpression(SourcePosition p, ExpressionPtr c)
      : Expression(ExpressionKind::call, p), callee(std::move(c)) {}
  ExpressionPtr callee;
  CallArguments arguments;
};

struct FilterExpression : Expression {
  FilterExpression(SourcePosition p, ExpressionPtr o, std::string n, FilterFunction f)
      : Expression(ExpressionKind::filter, p),
        operand(std::move(o)),
        name(std::move(n)),
        function(f) {}
  ExpressionPtr operand;  // null in a {% filter %} block: the block's text
  std::string name;
  FilterFunction function;
  CallArguments arguments;
};

struct TestExpression : Expression {
  TestExpression(SourcePosition p, ExpressionPtr o, std::string n, TestFunction f, bool neg)
      : Expression(ExpressionKind::test, p),
        operand(std::move(o)),
        name(std::move(n)),
        function(f),
        negated(neg) {}
  ExpressionPtr operand;
  std::string name;
  TestFunction function;
  bool negated;
  CallArguments arguments;
};

enum class UnaryOperator { logical_not, negate, plus };
struct UnaryExpression : Expression {
  UnaryExpression(SourcePosition p, UnaryOperator o, ExpressionPtr e)
      : Expression(ExpressionKind::unary, p), op(o), operand(std::move(e)) {}
  UnaryOperator op;
  ExpressionPtr operand;
};

enum class BinaryOperator {
  logical_and,
  logical_or,
  add,
  subtract,
  multiply,
  divide,
  floor_divide,
  modulo,
  power,
  concat,
};
struct BinaryExpression : Expression {
  BinaryExpression(SourcePosition p, BinaryOperator o, ExpressionPtr l, ExpressionPtr r)
      : Expression(ExpressionKind::binary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOperator op;
  ExpressionPtr left, right;
};

enum class CompareOperator {
  equal,
  not_equal,
  less,
  less_equal,
  greater,
  greater_equal,
  in,
  not_in
};
struct CompareExpression : Expression {
  CompareExpression(SourcePosition p, ExpressionPtr first)
      : Expression(ExpressionKind::compare, p), first(std::move(first)) {}
  ExpressionPtr first;
  std::vector<std::pair<CompareOperator, ExpressionPtr>> rest;
};

struct ConditionalExpression : Expression {
  ConditionalExpression(SourcePosition p) : Expression(ExpressionKind::conditional, p) {}
  ExpressionPtr condition, then, otherwise;  // otherwise may be null: undefined
};

enum class StatementKind {
  text,
  print,
  if_,
  for_,
  set,
  set_block,
  macro,
  call_block,
  filter_block,
  break_,
  continue_,
  scope,
};

struct Statement {
  Statement(StatementKind kind, SourcePosition position) : kind(kind), position(position) {}
  virtual ~Statement() = default;
  StatementKind kind;
  SourcePosition position;
};

struct TextStatement : Statement {
  TextStatement(SourcePosition p, std::string t)
      : Statement(StatementKind::text, p), text(TrackedString::from_template(std::move(t))) {}
  TrackedString text;
};

struct PrintStatement : Statement {
  PrintStatement(SourcePosition p, ExpressionPtr e)
      : Statement(StatementKind::print, p), expression(std::move(e)) {}
  ExpressionPtr expression;
};

struct IfStatement : Statement {
  explicit IfStatement(SourcePosition p) : Statement(StatementKind::if_, p) {}
  std::vector<std::pair<ExpressionPtr, Body>> branches;  // if and each elif
  Body otherwise;
};

// What a for or set binds: one name, several (unpacking), or a namespace attribute.
struct AssignTarget {
  std::vector<std::string> names;
  bool unpack = false;    // names came as a tuple
  std::string attribute;  // set ns.attribute = ...: names[0] is the namespace
};

struct ForStatement : Statement {
  explicit ForStatement(SourcePosition p) : Statement(StatementKind::for_, p) {}
  AssignTarget target;
  ExpressionPtr iterable;
  ExpressionPtr condition;  // may be null
  Body body;
  Body otherwise;
  bool recursive = false;
};

struct SetStatement : Statement {
  explicit SetStatement(SourcePosition p) : Statement(StatementKind::set, p) {}
  AssignTarget target;
  ExpressionPtr value;
};

struct SetBlockStatement : Statement {
  explicit SetBlockStatement(SourcePosition p) : Statement(StatementKind::set_block, p) {}
  AssignTarget target;
  Body body;
  std::vector<std::unique_ptr<FilterExpression>> filters;  // applied in order, operands null
};

struct MacroParameter {
  std::string name;
  ExpressionPtr default_value;  // may be null
};

struct MacroStatement : Statement {
  explicit MacroStatement(SourcePosition p) : Statement(StatementKind::macro, p) {}
  std::string name;
  std::vector<MacroParameter> parameters;
  Body body;
  bool uses_caller = false;
  // A macro whose body never names varargs (kwargs) refuses extra positional (keyword) arguments.
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct CallBlockStatement : Statement {
  explicit CallBlockStatement(SourcePosition p) : Statement(StatementKind::call_block, p) {}
  std::unique_ptr<CallExpression> call;
  std::vector<MacroParameter> caller_parameters;
  Body body;
};

struct FilterBlockStatement : Statement {
  explicit FilterBlockStatement(SourcePosition p) : Statement(StatementKind::filter_block, p) {}
  std::vector<std::unique_ptr<FilterExpression>> filters;
  Body body;
};

struct ControlStatement : Statement {
  ControlStatement(StatementKind k, SourcePosition p) : Statement(k, p) {}
};

// A block with a scope of its own: {% with a = 1 %} (its assignments evaluated outside it), and
// {% generation %} (transformers' assistant-mask marker, which only renders its body).
struct ScopeStatement : Statement {
  explicit ScopeStatement(SourcePosition p) : Statement(StatementKind::scope, p) {}
  std::vector<std::pair<std::string, ExpressionPtr>> assignments;
  Body body;
};

}  // namespace chatflow::jinja
