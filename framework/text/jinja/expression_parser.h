// The expression half of the parser: jinja2's expression grammar and operator precedence
// (conditional, or, and, not, comparisons, + -, ~, * / // %, **, unary, then primaries with
// attributes, subscripts, calls, filters and tests), over a template's tokens. Unknown filters
// and tests fail here, at load. parser.cpp builds the statements on top.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "framework/text/jinja/ast.h"
#include "framework/text/jinja/lexer.h"

namespace chatflow::jinja {

// How a token is named in "expected X, got Y".
std::string describe(const Token& token);

class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

 protected:
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

  // Nesting deep enough to exhaust the stack is refused (templates nest a few levels).
  class NestingGuard {
   public:
    explicit NestingGuard(ExpressionParser& parser) : parser_(parser) {
      if (++parser_.nesting_ > kMaxNesting) {
        --parser_.nesting_;
        parser_.fail("nesting deeper than " + std::to_string(kMaxNesting) + " levels");
      }
    }
    ~NestingGuard() { --parser_.nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

   private:
    ExpressionParser& parser_;
  };
  static constexpr int kMaxNesting = 200;
  // Expressions evaluate recursively, operand by operand; chains (a ~ b ~ c, x.a.b, v|f|g)
  // nest one level per link.
  static constexpr int kMaxExpressionDepth = 256;

  // `node` with its height (Expression::height) set from its operands', which every parse
  // function has already set; a syntax error where the node begins when it is too deep.
  template <class Node>
  std::unique_ptr<Node> bounded(std::unique_ptr<Node> node) const {
    set_height(*node);
    return node;
  }
  void set_height(Expression& node) const;

  ExpressionPtr parse_tuple(bool with_conditional = true);
  bool ends_expression() const;
  ExpressionPtr parse_expression();
  ExpressionPtr parse_or();
  ExpressionPtr parse_and();
  ExpressionPtr parse_not();
  ExpressionPtr parse_compare();
  ExpressionPtr parse_math1();
  ExpressionPtr parse_concat();
  ExpressionPtr parse_math2();
  ExpressionPtr parse_pow();
  ExpressionPtr parse_unary(bool with_filter);
  ExpressionPtr parse_primary();
  ExpressionPtr parse_postfix(ExpressionPtr node);
  ExpressionPtr parse_subscript(ExpressionPtr object);
  CallArguments parse_arguments();
  ExpressionPtr parse_call(ExpressionPtr callee);
  std::unique_ptr<FilterExpression> parse_filter_call(ExpressionPtr operand);
  ExpressionPtr parse_test(ExpressionPtr operand);
  ExpressionPtr parse_filter_expression(ExpressionPtr node);

  std::vector<Token> tokens_;
  size_t index_ = 0;
  int nesting_ = 0;
  // Whether the macro body being parsed names caller, varargs or kwargs.
  bool uses_caller_ = false;
  bool uses_varargs_ = false;
  bool uses_kwargs_ = false;
};

}  // namespace chatflow::jinja
