// Splits a template into tokens: literal text (after whitespace control, with transformers'
// trim_blocks and lstrip_blocks), tag delimiters, and the tokens of the expressions inside tags.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "framework/text/jinja/syntax_error.h"

namespace chatflow::jinja {

enum class TokenType {
  text,
  variable_begin,  // {{
  variable_end,    // }}
  block_begin,     // {%
  block_end,       // %}
  name,
  string,  // value already unescaped
  integer,
  floating,
  operator_,
  end_of_template,
};

struct Token {
  TokenType type;
  std::string value;
  SourcePosition position;
};

struct LexerOptions {
  bool trim_blocks = true;    // drop the first newline after a block tag
  bool lstrip_blocks = true;  // drop spaces and tabs before a block tag on its line
};

// Throws SyntaxError for an unterminated tag, comment or string, or a character no token starts.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace chatflow::jinja
