#include "framework/text/jinja/lexer.h"

#include <array>
#include <cctype>

#include "framework/text/utf8.h"

namespace chatflow::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool all_space(std::string_view text) {
  for (char c : text) {
    if (!is_space(c)) return false;
  }
  return true;
}

std::string_view rstrip(std::string_view text) {
  while (!text.empty() && is_space(text.back()))
    text.remove_suffix(1);
  return text;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options)
      : source_(source), options_(options) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < source_.size()) {
      size_t tag = find_tag_start(pos_);
      std::string_view text = source_.substr(pos_, tag - pos_);
      if (tag == source_.size()) {
        emit_text(text);
        advance_to(tag);
        break;
      }
      char kind = source_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        size_t line_begin = text.rfind('\n');
        line_begin = line_begin == std::string_view::npos ? 0 : line_begin + 1;
        if ((line_begin > 0 || line_starting) && all_space(text.substr(line_begin)))
          text = text.substr(0, line_begin);
      }
      emit_text(text);
      advance_to(tag);
      SourcePosition tag_position = position();
      advance_to(tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0));
      if (kind == '#') {
        line_starting = skip_comment(tag_position);
      } else if (kind == '%' && is_raw_block()) {
        line_starting = read_raw_block(tag_position);
      } else {
        line_starting = read_tag(kind == '{', tag_position);
      }
    }
    tokens_.push_back({TokenType::end_of_template, "", position()});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t i = from; i + 1 < source_.size(); ++i) {
      if (source_[i] == '{' &&
          (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#'))
        return i;
    }
    return source_.size();
  }

  SourcePosition position() const { return {line_, static_cast<int>(pos_ - line_start_) + 1}; }

  void advance_to(size_t target) {
    for (; pos_ < target; ++pos_) {
      if (source_[pos_] == '\n') {
        ++line_;
        line_start_ = pos_ + 1;
      }
    }
  }

  // Called while pos_ is still where the text starts.
  void emit_text(std::string_view text) {
    if (text.empty()) return;
    tokens_.push_back({TokenType::text, std::string(text), position()});
  }

  // After a tag's end: '-' strips all whitespace, trim_blocks one newline. Returns whether what
  // was consumed ends with a newline (jinja2's "line starting", which lstrip_blocks needs).
  bool after_tag_end(char sign, bool is_block) {
    bool newline = false;
    if (sign == '-') {
      while (pos_ < source_.size() && is_space(source_[pos_])) {
        newline = source_[pos_] == '\n';
        advance_to(pos_ + 1);
      }
    } else if (sign != '+' && is_block && options_.trim_blocks && pos_ < source_.size() &&
               source_[pos_] == '\n') {
      advance_to(pos_ + 1);
      newline = true;
    }
    return newline;
  }

  bool skip_comment(SourcePosition tag) {
    size_t end = source_.find("#}", pos_);
    if (end == std::string_view::npos) throw SyntaxError(tag, "missing end of comment tag");
    char sign = end > pos_ ? source_[end - 1] : '\0';
    advance_to(end + 2);
    return after_tag_end(sign == '-' || sign == '+' ? sign : '\0', true);
  }

  bool is_raw_block() const {
    size_t i = pos_;
    while (i < source_.size() && is_space(source_[i]))
      ++i;
    if (source_.substr(i, 3) != "raw") return false;
    i += 3;
    while (i < source_.size() && is_space(source_[i]))
      ++i;
    if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) ++i;
    return source_.substr(i, 2) == "%}";
  }

  // {% raw %}...{% endraw %}: the text between, untouched by the tag syntax.
  bool read_raw_block(SourcePosition tag) {
    size_t close = source_.find("%}", pos_);
    char sign = source_[close - 1];
    advance_to(close + 2);
    after_tag_end(sign == '-' || sign == '+' ? sign : '\0', true);
    size_t search = pos_;
    while (true) {
      size_t start = source_.find("{%", search);
      if (start == std::string_view::npos)
        throw SyntaxError(tag, "missing endraw tag for the raw block");
      size_t i = start + 2;
      char start_sign = i < source_.size() ? source_[i] : '\0';
      if (start_sign == '-' || start_sign == '+') ++i;
      while (i < source_.size() && is_space(source_[i]))
        ++i;
      if (source_.substr(i, 6) != "endraw") {
        search = start + 2;
        continue;
      }
      i += 6;
      while (i < source_.size() && is_space(source_[i]))
        ++i;
      char end_sign = '\0';
      if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) end_sign = source_[i++];
      if (source_.substr(i, 2) != "%}") {
        search = start + 2;
        continue;
      }
      std::string_view text = source_.substr(pos_, start - pos_);
      if (start_sign == '-') {
        text = rstrip(text);
      } else if (start_sign != '+' && options_.lstrip_blocks) {
        size_t line_begin = text.rfind('\n');
        line_begin = line_begin == std::string_view::npos ? 0 : line_begin + 1;
        if (line_begin > 0 && all_space(text.substr(line_begin))) text = text.substr(0, line_begin);
      }
      emit_text(text);
      advance_to(i + 2);
      return after_tag_end(end_sign, true);
    }
  }

  // The tokens of one {{ ... }} or {% ... %}, through its end delimiter.
  bool read_tag(bool is_variable, SourcePosition tag) {
    tokens_.push_back({is_variable ? TokenType::variable_begin : TokenType::block_begin, "", tag});
    int depth = 0;
    while (true) {
      while (pos_ < source_.size() && is_space(source_[pos_]))
        advance_to(pos_ + 1);
      if (pos_ >= source_.size()) {
        throw SyntaxError(tag, std::string("unexpected end of template, expected '") +
                                   (is_variable ? "}}" : "%}") + "'");
      }
      std::string_view rest = source_.substr(pos_);
      std::string_view close = is_variable ? "}}" : "%}";
      char sign = '\0';
      bool closes = false;
      if ((rest[0] == '-' || rest[0] == '+') && rest.substr(1, 2) == close) {
        sign = rest[0];
        closes = true;
      } else if (rest.substr(0, 2) == close && (depth == 0 || !is_variable)) {
        closes = true;
      }
      if (closes) {
        tokens_.push_back(
            {is_variable ? TokenType::variable_end : TokenType::block_end, "", position()});
        advance_to(pos_ + 2 + (sign ? 1 : 0));
        return after_tag_end(sign, !is_variable);
      }
      read_expression_token(depth);
    }
  }

  void read_expression_token(int& depth) {
    SourcePosition start = position();
    char c = source_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < source_.size() &&
             (std::isalnum(static_cast<unsigned char>(source_[end])) || source_[end] == '_'))
        ++end;
      tokens_.push_back({TokenType::name, std::string(source_.substr(pos_, end - pos_)), start});
      advance_to(end);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      read_number(start);
      return;
    }
    if (c == '\'' || c == '"') {
      read_string(start);
      return;
    }
    static constexpr std::array<std::string_view, 26> operators = {
        "//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
        ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}", "!"};
    for (std::string_view op : operators) {
      if (source_.substr(pos_, op.size()) == op) {
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") --depth;
        if (op == "!") break;
        tokens_.push_back({TokenType::operator_, std::string(op), start});
        advance_to(pos_ + op.size());
        return;
      }
    }
    throw SyntaxError(start, std::string("unexpected character '") + c + "'");
  }

  void read_number(SourcePosition start) {
    size_t end = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (end < source_.size() &&
             (std::isdigit(static_cast<unsigned char>(source_[end])) || source_[end] == '_'))
        ++end;
    };
    digits();
    if (end + 1 < source_.size() && source_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(source_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      size_t exponent = end + 1;
      if (exponent < source_.size() && (source_[exponent] == '+' || source_[exponent] == '-'))
        ++exponent;
      if (exponent < source_.size() &&
          std::isdigit(static_cast<unsigned char>(source_[exponent]))) {
        is_float = true;
        end = exponent;
        digits();
      }
    }
    std::string text;
    for (char d : source_.substr(pos_, end - pos_)) {
      if (d != '_') text += d;
    }
    tokens_.push_back({is_float ? TokenType::floating : TokenType::integer, text, start});
    advance_to(end);
  }

  void read_string(SourcePosition start) {
    char quote = source_[pos_];
    size_t i = pos_ + 1;
    std::string value;
    while (true) {
      if (i >= source_.size()) throw SyntaxError(start, "unterminated string");
      char c = source_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= source_.size()) {
        value += c;
        ++i;
        continue;
      }
      char escaped = source_[i + 1];
      i += 2;
      switch (escaped) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '0':
          value += '\0';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case 'a':
          value += '\a';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t width = escaped == 'x' ? 2 : (escaped == 'u' ? 4 : 8);
          std::string hex(source_.substr(i, width));
          if (hex.size() != width ||
              hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            throw SyntaxError(start,
                              "truncated \\" + std::string(1, escaped) + " escape in string");
          const auto code_point = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
          if (code_point > 0x10FFFF)  // as Python: "illegal Unicode character"
            throw SyntaxError(start, "illegal Unicode character in string");
          text::append(value, code_point);
          i += width;
          break;
        }
        default:
          value += '\\';
          value += escaped;
      }
    }
    tokens_.push_back({TokenType::string, value, start});
    advance_to(i + 1);
  }

  std::string_view source_;
  LexerOptions options_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
};

// jinja2 reads a template as Python's source.splitlines() joined by "\n": every line break
// (\r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029) becomes "\n", and one final line break
// is dropped (keep_trailing_newline is off).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    size_t width = 0;
    if (c == '\r' && i + 1 < source.size() && source[i + 1] == '\n') {
      width = 2;
    } else if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '\x1c' || c == '\x1d' ||
               c == '\x1e') {
      width = 1;
    } else if (source.substr(i, 2) == "\xC2\x85") {
      width = 2;
    } else if (source.substr(i, 3) == "\xE2\x80\xA8" || source.substr(i, 3) == "\xE2\x80\xA9") {
      width = 3;
    }
    if (width == 0) {
      out += c;
      continue;
    }
    i += width - 1;
    if (i + 1 < source.size()) out += '\n';  // the last line break ends the last line: dropped
  }
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  std::string normalized = normalize_newlines(source);
  return Lexer(normalized, options).run();
}

}  // namespace chatflow::jinja
