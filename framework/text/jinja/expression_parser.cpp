#include "framework/text/jinja/expression_parser.h"

#include <charconv>
#include <optional>

namespace chatflow::jinja {

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::text:
      return "template data";
    case TokenType::variable_begin:
      return "'{{'";
    case TokenType::variable_end:
      return "end of print statement";
    case TokenType::block_begin:
      return "'{%'";
    case TokenType::block_end:
      return "end of statement block";
    case TokenType::end_of_template:
      return "end of template";
    case TokenType::string:
      return "string";
    case TokenType::integer:
      return "integer";
    case TokenType::floating:
      return "float";
    default:
      return "'" + token.value + "'";
  }
}

namespace {

int height_of(const ExpressionPtr& node) {
  return node ? node->height : 0;
}

int height_of(const CallArguments& arguments) {
  int height = 0;
  for (const auto& argument : arguments.positional)
    height = std::max(height, height_of(argument));
  for (const auto& [name, argument] : arguments.keyword)
    height = std::max(height, height_of(argument));
  return height;
}

// The tallest operand of `node`.
int operands_height(const Expression& node) {
  switch (node.kind) {
    case ExpressionKind::literal:
    case ExpressionKind::name:
      return 0;
    case ExpressionKind::list: {
      int height = 0;
      for (const auto& item : static_cast<const ListExpression&>(node).items)
        height = std::max(height, height_of(item));
      return height;
    }
    case ExpressionKind::dict: {
      int height = 0;
      for (const auto& [key, value] : static_cast<const DictExpression&>(node).entries)
        height = std::max({height, height_of(key), height_of(value)});
      return height;
    }
    case ExpressionKind::attribute:
      return height_of(static_cast<const AttributeExpression&>(node).object);
    case ExpressionKind::subscript: {
      const auto& subscript = static_cast<const SubscriptExpression&>(node);
      return std::max(height_of(subscript.object), height_of(subscript.index));
    }
    case ExpressionKind::slice: {
      const auto& slice = static_cast<const SliceExpression&>(node);
      return std::max({height_of(slice.object), height_of(slice.start), height_of(slice.stop),
                       height_of(slice.step)});
    }
    case ExpressionKind::call: {
      const auto& call = static_cast<const CallExpression&>(node);
      return std::max(height_of(call.callee), height_of(call.arguments));
    }
    case ExpressionKind::filter: {
      const auto& filter = static_cast<const FilterExpression&>(node);
      return std::max(height_of(filter.operand), height_of(filter.arguments));
    }
    case ExpressionKind::test: {
      const auto& test = static_cast<const TestExpression&>(node);
      return std::max(height_of(test.operand), height_of(test.arguments));
    }
    case ExpressionKind::unary:
      return height_of(static_cast<const UnaryExpression&>(node).operand);
    case ExpressionKind::binary: {
      const auto& binary = static_cast<const BinaryExpression&>(node);
      return std::max(height_of(binary.left), height_of(binary.right));
    }
    case ExpressionKind::compare: {
      const auto& compare = static_cast<const CompareExpression&>(node);
      int height = height_of(compare.first);
      for (const auto& [op, operand] : compare.rest)
        height = std::max(height, height_of(operand));
      return height;
    }
    case ExpressionKind::conditional: {
      const auto& conditional = static_cast<const ConditionalExpression&>(node);
      return std::max({height_of(conditional.condition), height_of(conditional.then),
                       height_of(conditional.otherwise)});
    }
  }
  return 0;
}

}  // namespace

void ExpressionParser::set_height(Expression& node) const {
  node.height = operands_height(node) + 1;
  if (node.height > kMaxExpressionDepth)
    throw SyntaxError(node.position, "expression nested deeper than " +
                                         std::to_string(kMaxExpressionDepth) +
                                         " levels (operators, attributes, filters and calls "
                                         "chained one after another count one level each)");
}

// Expressions, lowest precedence first.
ExpressionPtr ExpressionParser::parse_tuple(bool with_conditional) {
  SourcePosition position = current().position;
  auto first = with_conditional ? parse_expression() : parse_or();
  if (!at_operator(",")) return first;
  auto tuple = std::make_unique<ListExpression>(position, true);
  tuple->items.push_back(std::move(first));
  while (skip_operator(",")) {
    if (ends_expression()) break;
    tuple->items.push_back(with_conditional ? parse_expression() : parse_or());
  }
  return bounded(std::move(tuple));
}

bool ExpressionParser::ends_expression() const {
  const Token& token = current();
  return token.type == TokenType::variable_end || token.type == TokenType::block_end ||
         (token.type == TokenType::operator_ && (token.value == ")" || token.value == "]")) ||
         (token.type == TokenType::name && (token.value == "if" || token.value == "in"));
}

ExpressionPtr ExpressionParser::parse_expression() {
  auto expression = parse_or();
  while (at_name("if")) {
    auto conditional = std::make_unique<ConditionalExpression>(next().position);
    conditional->then = std::move(expression);
    conditional->condition = parse_or();
    if (skip_name("else")) conditional->otherwise = parse_expression();
    expression = bounded(std::move(conditional));
  }
  return expression;
}

ExpressionPtr ExpressionParser::parse_or() {
  auto left = parse_and();
  while (at_name("or")) {
    SourcePosition position = next().position;
    left = bounded(std::make_unique<BinaryExpression>(position, BinaryOperator::logical_or,
                                                      std::move(left), parse_and()));
  }
  return left;
}

ExpressionPtr ExpressionParser::parse_and() {
  auto left = parse_not();
  while (at_name("and")) {
    SourcePosition position = next().position;
    left = bounded(std::make_unique<BinaryExpression>(position, BinaryOperator::logical_and,
                                                      std::move(left), parse_not()));
  }
  return left;
}

ExpressionPtr ExpressionParser::parse_not() {
  NestingGuard guard(*this);
  if (at_name("not")) {
    SourcePosition position = next().position;
    return bounded(
        std::make_unique<UnaryExpression>(position, UnaryOperator::logical_not, parse_not()));
  }
  return parse_compare();
}

ExpressionPtr ExpressionParser::parse_compare() {
  SourcePosition position = current().position;
  auto first = parse_math1();
  std::unique_ptr<CompareExpression> compare;
  while (true) {
    std::optional<CompareOperator> op;
    const Token& token = current();
    if (token.type == TokenType::operator_) {
      if (token.value == "==")
        op = CompareOperator::equal;
      else if (token.value == "!=")
        op = CompareOperator::not_equal;
      else if (token.value == "<")
        op = CompareOperator::less;
      else if (token.value == "<=")
        op = CompareOperator::less_equal;
      else if (token.value == ">")
        op = CompareOperator::greater;
      else if (token.value == ">=")
        op = CompareOperator::greater_equal;
      if (op) next();
    } else if (at_name("in")) {
      next();
      op = CompareOperator::in;
    } else if (at_name("not") && peek().type == TokenType::name && peek().value == "in") {
      next();
      next();
      op = CompareOperator::not_in;
    }
    if (!op) break;
    if (!compare) compare = std::make_unique<CompareExpression>(position, std::move(first));
    compare->rest.emplace_back(*op, parse_math1());
  }
  if (compare) return bounded(std::move(compare));
  return first;
}

ExpressionPtr ExpressionParser::parse_math1() {
  auto left = parse_concat();
  while (at_operator("+") || at_operator("-")) {
    const Token& token = next();
    auto op = token.value == "+" ? BinaryOperator::add : BinaryOperator::subtract;
    left = bounded(
        std::make_unique<BinaryExpression>(token.position, op, std::move(left), parse_concat()));
  }
  return left;
}

ExpressionPtr ExpressionParser::parse_concat() {
  auto left = parse_math2();
  while (at_operator("~")) {
    SourcePosition position = next().position;
    left = bounded(std::make_unique<BinaryExpression>(position, BinaryOperator::concat,
                                                      std::move(left), parse_math2()));
  }
  return left;
}

ExpressionPtr ExpressionParser::parse_math2() {
  auto left = parse_pow();
  while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
    const Token& token = next();
    BinaryOperator op = token.value == "*"    ? BinaryOperator::multiply
                        : token.value == "/"  ? BinaryOperator::divide
                        : token.value == "//" ? BinaryOperator::floor_divide
                                              : BinaryOperator::modulo;
    left = bounded(
        std::make_unique<BinaryExpression>(token.position, op, std::move(left), parse_pow()));
  }
  return left;
}

ExpressionPtr ExpressionParser::parse_pow() {
  auto left = parse_unary(true);
  while (at_operator("**")) {
    SourcePosition position = next().position;
    left = bounded(std::make_unique<BinaryExpression>(position, BinaryOperator::power,
                                                      std::move(left), parse_unary(true)));
  }
  return left;
}

ExpressionPtr ExpressionParser::parse_unary(bool with_filter) {
  NestingGuard guard(*this);
  ExpressionPtr node;
  if (at_operator("-") || at_operator("+")) {
    const Token& token = next();
    node = bounded(std::make_unique<UnaryExpression>(
        token.position, token.value == "-" ? UnaryOperator::negate : UnaryOperator::plus,
        parse_unary(false)));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expression(std::move(node));
  return node;
}

ExpressionPtr ExpressionParser::parse_primary() {
  NestingGuard guard(*this);
  const Token& token = current();
  SourcePosition position = token.position;
  switch (token.type) {
    case TokenType::name: {
      std::string name = next().value;
      if (name == "true" || name == "True")
        return std::make_unique<LiteralExpression>(position, Value(true));
      if (name == "false" || name == "False")
        return std::make_unique<LiteralExpression>(position, Value(false));
      if (name == "none" || name == "None")
        return std::make_unique<LiteralExpression>(position, Value(None{}));
      if (name == "lipsum") throw SyntaxError(position, "lipsum() is not supported");
      uses_varargs_ = uses_varargs_ || name == "varargs";
      uses_kwargs_ = uses_kwargs_ || name == "kwargs";
      return std::make_unique<NameExpression>(position, name);
    }
    case TokenType::string: {
      std::string text = next().value;
      while (current().type == TokenType::string)
        text += next().value;
      return std::make_unique<LiteralExpression>(position, Value::template_string(std::move(text)));
    }
    case TokenType::integer: {
      int64_t number = 0;
      const std::string& text = next().value;
      auto result = std::from_chars(text.data(), text.data() + text.size(), number);
      if (result.ec != std::errc()) throw SyntaxError(position, "integer out of range: " + text);
      return std::make_unique<LiteralExpression>(position, Value(number));
    }
    case TokenType::floating:
      return std::make_unique<LiteralExpression>(position, Value(std::stod(next().value)));
    case TokenType::operator_:
      if (token.value == "(") {
        next();
        if (skip_operator(")")) return std::make_unique<ListExpression>(position, true);
        auto inner = parse_tuple();
        expect_operator(")");
        return inner;
      }
      if (token.value == "[") {
        next();
        auto list = std::make_unique<ListExpression>(position, false);
        while (!skip_operator("]")) {
          if (!list->items.empty()) expect_operator(",");
          if (skip_operator("]")) break;
          list->items.push_back(parse_expression());
        }
        return bounded(std::move(list));
      }
      if (token.value == "{") {
        next();
        auto dict = std::make_unique<DictExpression>(position);
        while (!skip_operator("}")) {
          if (!dict->entries.empty()) expect_operator(",");
          if (skip_operator("}")) break;
          auto key = parse_expression();
          expect_operator(":");
          dict->entries.emplace_back(std::move(key), parse_expression());
        }
        return bounded(std::move(dict));
      }
      break;
    default:
      break;
  }
  fail("unexpected " + describe(token));
}

ExpressionPtr ExpressionParser::parse_postfix(ExpressionPtr node) {
  while (true) {
    if (at_operator(".")) {
      SourcePosition position = next().position;
      if (current().type == TokenType::integer) {
        Value index(static_cast<int64_t>(std::stoll(next().value)));
        node = bounded(std::make_unique<SubscriptExpression>(
            position, std::move(node), std::make_unique<LiteralExpression>(position, index)));
      } else {
        node = bounded(
            std::make_unique<AttributeExpression>(position, std::move(node), expect_identifier()));
      }
    } else if (at_operator("[")) {
      node = parse_subscript(std::move(node));
    } else if (at_operator("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExpressionPtr ExpressionParser::parse_subscript(ExpressionPtr object) {
  SourcePosition position = next().position;
  ExpressionPtr start;
  if (!at_operator(":")) {
    start = parse_expression();
    if (skip_operator("]")) {
      return bounded(
          std::make_unique<SubscriptExpression>(position, std::move(object), std::move(start)));
    }
  }
  auto slice = std::make_unique<SliceExpression>(position, std::move(object));
  slice->start = std::move(start);
  expect_operator(":");
  if (!at_operator("]") && !at_operator(":")) slice->stop = parse_expression();
  if (skip_operator(":") && !at_operator("]")) slice->step = parse_expression();
  expect_operator("]");
  return bounded(std::move(slice));
}

CallArguments ExpressionParser::parse_arguments() {
  CallArguments arguments;
  expect_operator("(");
  bool first = true;
  while (!skip_operator(")")) {
    if (!first) expect_operator(",");
    first = false;
    if (skip_operator(")")) break;
    if (current().type == TokenType::name && peek().type == TokenType::operator_ &&
        peek().value == "=") {
      std::string name = next().value;
      next();
      arguments.keyword.emplace_back(std::move(name), parse_expression());
    } else {
      if (!arguments.keyword.empty()) fail("positional argument after keyword argument");
      arguments.positional.push_back(parse_expression());
    }
  }
  return arguments;
}

ExpressionPtr ExpressionParser::parse_call(ExpressionPtr callee) {
  SourcePosition position = current().position;
  if (callee->kind == ExpressionKind::name &&
      static_cast<NameExpression&>(*callee).name == "caller")
    uses_caller_ = true;
  auto call = std::make_unique<CallExpression>(position, std::move(callee));
  call->arguments = parse_arguments();
  return bounded(std::move(call));
}

std::unique_ptr<FilterExpression> ExpressionParser::parse_filter_call(ExpressionPtr operand) {
  SourcePosition position = current().position;
  std::string name = expect_identifier();
  while (at_operator(".")) {
    next();
    name += "." + expect_identifier();
  }
  FilterFunction function = find_filter(name);
  if (!function) throw SyntaxError(position, "no filter named '" + name + "'");
  auto filter = std::make_unique<FilterExpression>(position, std::move(operand), name, function);
  if (at_operator("(")) filter->arguments = parse_arguments();
  return bounded(std::move(filter));
}

ExpressionPtr ExpressionParser::parse_test(ExpressionPtr operand) {
  next();  // is
  bool negated = skip_name("not");
  SourcePosition position = current().position;
  std::string name = expect_identifier();
  TestFunction function = find_test(name);
  if (!function) throw SyntaxError(position, "no test named '" + name + "'");
  auto test =
      std::make_unique<TestExpression>(position, std::move(operand), name, function, negated);
  const Token& token = current();
  if (at_operator("(")) {
    test->arguments = parse_arguments();
  } else if ((token.type == TokenType::name || token.type == TokenType::string ||
              token.type == TokenType::integer || token.type == TokenType::floating ||
              at_operator("[") || at_operator("{")) &&
             !at_name("else") && !at_name("or") && !at_name("and")) {
    if (at_name("is")) fail("tests cannot be chained with 'is'");
    test->arguments.positional.push_back(parse_postfix(parse_primary()));
  }
  return bounded(std::move(test));
}

ExpressionPtr ExpressionParser::parse_filter_expression(ExpressionPtr node) {
  while (true) {
    if (at_operator("|")) {
      next();
      node = parse_filter_call(std::move(node));
    } else if (at_name("is")) {
      node = parse_test(std::move(node));
    } else if (at_operator("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

}  // namespace chatflow::jinja
