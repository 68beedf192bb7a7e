// Tokens to the statement tree, with jinja2's grammar and operator precedence. Unknown tags,
// filters and tests fail here, at load, with the line and column where they appear.
#pragma once

#include <string_view>

#include "framework/text/jinja/ast.h"
#include "framework/text/jinja/lexer.h"

namespace chatflow::jinja {

// Throws SyntaxError.
Body parse_template(std::string_view source, const LexerOptions& options = {});

}  // namespace chatflow::jinja
