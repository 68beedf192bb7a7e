#include "framework/text/jinja/parser.h"

#include <charconv>
#include <initializer_list>

namespace chatflow::jinja {
namespace {

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

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse() {
    Body body = parse_body({});
    return body;
  }

 private:
  const Token& current() const { return tokens_[index_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(index_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& token = tokens_[index_];
    if (index_ + 1 < tokens_.size()) ++index_;
    return token;
  }
  bool at_operator(std::string_view op) const {
    return current().type == TokenType::operator_ && current().value == op;
  }
  bool at_name(std::string_view name) const {
    return current().type == TokenType::name && current().value == name;
  }
  bool skip_operator(std::string_view op) {
    if (!at_operator(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw SyntaxError(current().position, message);
  }
  [[noreturn]] void fail_expected(const std::string& what) const {
    fail("expected " + what + ", got " + describe(current()));
  }
  void expect_operator(std::string_view op) {
    if (!skip_operator(op)) fail_expected("'" + std::string(op) + "'");
  }
  void expect_name(std::string_view name) {
    if (!skip_name(name)) fail_expected("'" + std::string(name) + "'");
  }
  std::string expect_identifier() {
    if (current().type != TokenType::name) fail_expected("a name");
    return next().value;
  }
  void expect_block_end() {
    if (current().type != TokenType::block_end) fail_expected("end of statement block");
    next();
  }

  // Statements until one of `end_tags` opens a block (left as the current token: its name).
  Body parse_body(std::initializer_list<std::string_view> end_tags,
                  std::string_view innermost = "") {
    Body body;
    while (true) {
      const Token& token = current();
      switch (token.type) {
        case TokenType::end_of_template:
          if (end_tags.size() != 0) {
            std::string expected;
            for (std::string_view tag : end_tags)
              expected += (expected.empty() ? "'" : " or '") + std::string(tag) + "'";
            fail("unexpected end of template: looking for " + expected + " to close '" +
                 std::string(innermost) + "'");
          }
          return body;
        case TokenType::text:
          body.push_back(std::make_unique<TextStatement>(token.position, token.value));
          next();
          break;
        case TokenType::variable_begin: {
          SourcePosition position = next().position;
          auto expression = parse_tuple();
          if (current().type != TokenType::variable_end) fail_expected("end of print statement");
          next();
          body.push_back(std::make_unique<PrintStatement>(position, std::move(expression)));
          break;
        }
        case TokenType::block_begin: {
          const Token& tag = peek();
          if (tag.type == TokenType::name) {
            for (std::string_view end_tag : end_tags) {
              if (tag.value == end_tag) {
                next();  // leaves the tag's name current
                return body;
              }
            }
          }
          next();
          body.push_back(parse_statement());
          break;
        }
        default:
          fail("unexpected " + describe(token));
      }
    }
  }

  // Nesting deep enough to exhaust the stack is refused (templates nest a few levels).
  class NestingGuard {
   public:
    explicit NestingGuard(Parser& parser) : parser_(parser) {
      if (++parser_.nesting_ > kMaxNesting) {
        --parser_.nesting_;
        parser_.fail("nesting deeper than " + std::to_string(kMaxNesting) + " levels");
      }
    }
    ~NestingGuard() { --parser_.nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

   private:
    Parser& parser_;
  };
  static constexpr int kMaxNesting = 200;

  StatementPtr parse_statement() {
    NestingGuard guard(*this);
    if (current().type != TokenType::name) fail_expected("a tag name");
    const Token& tag = current();
    SourcePosition position = tag.position;
    std::string name = tag.value;
    if (name == "if") return parse_if(position);
    if (name == "for") return parse_for(position);
    if (name == "set") return parse_set(position);
    if (name == "macro") return parse_macro(position);
    if (name == "call") return parse_call_block(position);
    if (name == "filter") return parse_filter_block(position);
    if (name == "generation") {
      next();
      expect_block_end();
      auto scope = std::make_unique<ScopeStatement>(position);
      scope->body = parse_body({"endgeneration"}, "generation");
      next();
      expect_block_end();
      return scope;
    }
    if (name == "block") {
      // Without inheritance a block renders where it stands.
      next();
      std::string block_name = expect_identifier();
      skip_name("scoped");
      skip_name("required");
      expect_block_end();
      auto scope = std::make_unique<ScopeStatement>(position);
      scope->body = parse_body({"endblock"}, "block");
      next();
      if (current().type == TokenType::name && current().value == block_name) next();
      expect_block_end();
      return scope;
    }
    if (name == "with") {
      next();
      auto scope = std::make_unique<ScopeStatement>(position);
      while (current().type != TokenType::block_end) {
        if (!scope->assignments.empty()) expect_operator(",");
        std::string variable = expect_identifier();
        expect_operator("=");
        scope->assignments.emplace_back(std::move(variable), parse_expression());
      }
      expect_block_end();
      scope->body = parse_body({"endwith"}, "with");
      next();
      expect_block_end();
      return scope;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside of a for loop");
      next();
      expect_block_end();
      return std::make_unique<ControlStatement>(
          name == "break" ? StatementKind::break_ : StatementKind::continue_, position);
    }
    fail("unknown tag '" + name + "'");
  }

  StatementPtr parse_if(SourcePosition position) {
    next();
    auto statement = std::make_unique<IfStatement>(position);
    while (true) {
      auto condition = parse_tuple();
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"}, "if");
      statement->branches.emplace_back(std::move(condition), std::move(body));
      std::string tag = next().value;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        statement->otherwise = parse_body({"endif"}, "if");
        next();
      }
      expect_block_end();
      return statement;
    }
  }

  AssignTarget parse_assign_target(bool allow_attribute) {
    AssignTarget target;
    bool parenthesized = skip_operator("(");
    target.names.push_back(expect_identifier());
    if (allow_attribute && !parenthesized && skip_operator(".")) {
      target.attribute = expect_identifier();
      return target;
    }
    while (skip_operator(",")) {
      target.unpack = true;
      if (at_operator(")") || at_name("in") || at_operator("=")) break;
      target.names.push_back(expect_identifier());
    }
    if (parenthesized) {
      target.unpack = true;
      expect_operator(")");
    }
    return target;
  }

  StatementPtr parse_for(SourcePosition position) {
    next();
    auto statement = std::make_unique<ForStatement>(position);
    statement->target = parse_assign_target(false);
    expect_name("in");
    statement->iterable = parse_tuple(/*with_conditional=*/false);
    if (skip_name("if")) statement->condition = parse_expression();
    statement->recursive = skip_name("recursive");
    expect_block_end();
    ++loop_depth_;
    statement->body = parse_body({"endfor", "else"}, "for");
    --loop_depth_;
    if (next().value == "else") {
      expect_block_end();
      statement->otherwise = parse_body({"endfor"}, "for");
      next();
    }
    expect_block_end();
    return statement;
  }

  StatementPtr parse_set(SourcePosition position) {
    next();
    AssignTarget target = parse_assign_target(true);
    if (skip_operator("=")) {
      auto statement = std::make_unique<SetStatement>(position);
      statement->target = std::move(target);
      statement->value = parse_tuple();
      expect_block_end();
      return statement;
    }
    auto statement = std::make_unique<SetBlockStatement>(position);
    statement->target = std::move(target);
    while (skip_operator("|"))
      statement->filters.push_back(parse_filter_call(nullptr));
    expect_block_end();
    statement->body = parse_body({"endset"}, "set");
    next();
    expect_block_end();
    return statement;
  }

  std::vector<MacroParameter> parse_parameters() {
    std::vector<MacroParameter> parameters;
    expect_operator("(");
    while (!skip_operator(")")) {
      if (!parameters.empty()) expect_operator(",");
      if (skip_operator(")")) break;
      MacroParameter parameter;
      parameter.name = expect_identifier();
      if (skip_operator("=")) parameter.default_value = parse_expression();
      parameters.push_back(std::move(parameter));
    }
    return parameters;
  }

  StatementPtr parse_macro(SourcePosition position) {
    next();
    auto statement = std::make_unique<MacroStatement>(position);
    statement->name = expect_identifier();
    statement->parameters = parse_parameters();
    expect_block_end();
    int outer_loop_depth = loop_depth_;
    loop_depth_ = 0;
    bool outer_caller = uses_caller_, outer_varargs = uses_varargs_, outer_kwargs = uses_kwargs_;
    uses_caller_ = uses_varargs_ = uses_kwargs_ = false;
    statement->body = parse_body({"endmacro"}, "macro");
    statement->uses_caller = uses_caller_;
    statement->uses_varargs = uses_varargs_;
    statement->uses_kwargs = uses_kwargs_;
    uses_caller_ = outer_caller;
    uses_varargs_ = outer_varargs || uses_varargs_;
    uses_kwargs_ = outer_kwargs || uses_kwargs_;
    loop_depth_ = outer_loop_depth;
    next();
    expect_block_end();
    return statement;
  }

  StatementPtr parse_call_block(SourcePosition position) {
    next();
    auto statement = std::make_unique<CallBlockStatement>(position);
    if (at_operator("(")) statement->caller_parameters = parse_parameters();
    auto call = parse_expression();
    if (call->kind != ExpressionKind::call) fail("expected a call after 'call'");
    statement->call.reset(static_cast<CallExpression*>(call.release()));
    expect_block_end();
    statement->body = parse_body({"endcall"}, "call");
    next();
    expect_block_end();
    return statement;
  }

  StatementPtr parse_filter_block(SourcePosition position) {
    next();
    auto statement = std::make_unique<FilterBlockStatement>(position);
    statement->filters.push_back(parse_filter_call(nullptr));
    while (skip_operator("|"))
      statement->filters.push_back(parse_filter_call(nullptr));
    expect_block_end();
    statement->body = parse_body({"endfilter"}, "filter");
    next();
    expect_block_end();
    return statement;
  }

  // Expressions, lowest precedence first.
  ExpressionPtr parse_tuple(bool with_conditional = true) {
    SourcePosition position = current().position;
    auto first = with_conditional ? parse_expression() : parse_or();
    if (!at_operator(",")) return first;
    auto tuple = std::make_unique<ListExpression>(position, true);
    tuple->items.push_back(std::move(first));
    while (skip_operator(",")) {
      if (ends_expression()) break;
      tuple->items.push_back(with_conditional ? parse_expression() : parse_or());
    }
    return tuple;
  }

  bool ends_expression() const {
    const Token& token = current();
    return token.type == TokenType::variable_end || token.type == TokenType::block_end ||
           (token.type == TokenType::operator_ && (token.value == ")" || token.value == "]")) ||
           (token.type == TokenType::name && (token.value == "if" || token.value == "in"));
  }

  ExpressionPtr parse_expression() {
    auto expression = parse_or();
    while (at_name("if")) {
      auto conditional = std::make_unique<ConditionalExpression>(next().position);
      conditional->then = std::move(expression);
      conditional->condition = parse_or();
      if (skip_name("else")) conditional->otherwise = parse_expression();
      expression = std::move(conditional);
    }
    return expression;
  }

  ExpressionPtr parse_or() {
    auto left = parse_and();
    while (at_name("or")) {
      SourcePosition position = next().position;
      left = std::make_unique<BinaryExpression>(position, BinaryOperator::logical_or,
                                                std::move(left), parse_and());
    }
    return left;
  }

  ExpressionPtr parse_and() {
    auto left = parse_not();
    while (at_name("and")) {
      SourcePosition position = next().position;
      left = std::make_unique<BinaryExpression>(position, BinaryOperator::logical_and,
                                                std::move(left), parse_not());
    }
    return left;
  }

  ExpressionPtr parse_not() {
    NestingGuard guard(*this);
    if (at_name("not")) {
      SourcePosition position = next().position;
      return std::make_unique<UnaryExpression>(position, UnaryOperator::logical_not, parse_not());
    }
    return parse_compare();
  }

  ExpressionPtr parse_compare() {
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
    if (compare) return compare;
    return first;
  }

  ExpressionPtr parse_math1() {
    auto left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      const Token& token = next();
      auto op = token.value == "+" ? BinaryOperator::add : BinaryOperator::subtract;
      left =
          std::make_unique<BinaryExpression>(token.position, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExpressionPtr parse_concat() {
    auto left = parse_math2();
    while (at_operator("~")) {
      SourcePosition position = next().position;
      left = std::make_unique<BinaryExpression>(position, BinaryOperator::concat, std::move(left),
                                                parse_math2());
    }
    return left;
  }

  ExpressionPtr parse_math2() {
    auto left = parse_pow();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const Token& token = next();
      BinaryOperator op = token.value == "*"    ? BinaryOperator::multiply
                          : token.value == "/"  ? BinaryOperator::divide
                          : token.value == "//" ? BinaryOperator::floor_divide
                                                : BinaryOperator::modulo;
      left = std::make_unique<BinaryExpression>(token.position, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExpressionPtr parse_pow() {
    auto left = parse_unary(true);
    while (at_operator("**")) {
      SourcePosition position = next().position;
      left = std::make_unique<BinaryExpression>(position, BinaryOperator::power, std::move(left),
                                                parse_unary(true));
    }
    return left;
  }

  ExpressionPtr parse_unary(bool with_filter) {
    NestingGuard guard(*this);
    ExpressionPtr node;
    if (at_operator("-") || at_operator("+")) {
      const Token& token = next();
      node = std::make_unique<UnaryExpression>(
          token.position, token.value == "-" ? UnaryOperator::negate : UnaryOperator::plus,
          parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expression(std::move(node));
    return node;
  }

  ExpressionPtr parse_primary() {
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
        return std::make_unique<LiteralExpression>(position,
                                                   Value::template_string(std::move(text)));
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
          return list;
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
          return dict;
        }
        break;
      default:
        break;
    }
    fail("unexpected " + describe(token));
  }

  ExpressionPtr parse_postfix(ExpressionPtr node) {
    while (true) {
      if (at_operator(".")) {
        SourcePosition position = next().position;
        if (current().type == TokenType::integer) {
          Value index(static_cast<int64_t>(std::stoll(next().value)));
          node = std::make_unique<SubscriptExpression>(
              position, std::move(node), std::make_unique<LiteralExpression>(position, index));
        } else {
          node =
              std::make_unique<AttributeExpression>(position, std::move(node), expect_identifier());
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

  ExpressionPtr parse_subscript(ExpressionPtr object) {
    SourcePosition position = next().position;
    ExpressionPtr start;
    if (!at_operator(":")) {
      start = parse_expression();
      if (skip_operator("]")) {
        return std::make_unique<SubscriptExpression>(position, std::move(object), std::move(start));
      }
    }
    auto slice = std::make_unique<SliceExpression>(position, std::move(object));
    slice->start = std::move(start);
    expect_operator(":");
    if (!at_operator("]") && !at_operator(":")) slice->stop = parse_expression();
    if (skip_operator(":") && !at_operator("]")) slice->step = parse_expression();
    expect_operator("]");
    return slice;
  }

  CallArguments parse_arguments() {
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

  ExpressionPtr parse_call(ExpressionPtr callee) {
    SourcePosition position = current().position;
    if (callee->kind == ExpressionKind::name &&
        static_cast<NameExpression&>(*callee).name == "caller")
      uses_caller_ = true;
    auto call = std::make_unique<CallExpression>(position, std::move(callee));
    call->arguments = parse_arguments();
    return call;
  }

  std::unique_ptr<FilterExpression> parse_filter_call(ExpressionPtr operand) {
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
    return filter;
  }

  ExpressionPtr parse_test(ExpressionPtr operand) {
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
    return test;
  }

  ExpressionPtr parse_filter_expression(ExpressionPtr node) {
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

  std::vector<Token> tokens_;
  size_t index_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
  bool uses_caller_ = false;
  bool uses_varargs_ = false;
  bool uses_kwargs_ = false;
};

}  // namespace

Body parse_template(std::string_view source, const LexerOptions& options) {
  return Parser(tokenize(source, options)).parse();
}

}  // namespace chatflow::jinja
