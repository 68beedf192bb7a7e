#include "framework/text/jinja/parser.h"

#include <initializer_list>

#include "framework/text/jinja/expression_parser.h"

namespace chatflow::jinja {
namespace {

// The statements: text, {{ }}, and the tags, each parsed to its node.
class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  Body parse() {
    Body body = parse_body({});
    return body;
  }

 private:
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

  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source, const LexerOptions& options) {
  return Parser(tokenize(source, options)).parse();
}

}  // namespace chatflow::jinja
