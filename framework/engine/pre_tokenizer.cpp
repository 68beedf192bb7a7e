#include "framework/engine/pre_tokenizer.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <re2/re2.h>

#include "framework/engine/pre_tokenizer_table.h"
#include "framework/engine/unicode.h"

namespace chatflow::engine {
namespace {

using Range = std::pair<size_t, size_t>;  // code point indexes, [first, second)

// llama.cpp runs an expression that names a Unicode category on "collapsed" text: every code
// point above 127 becomes one byte standing for its category, and \p{X} matches that byte and
// the ASCII members llama.cpp lists for X.
constexpr unsigned char kCollapsedOther = 0xD0;
constexpr unsigned char kCollapsedNumber = 0xD1;
constexpr unsigned char kCollapsedLetter = 0xD2;
constexpr unsigned char kCollapsedPunctuation = 0xD3;
constexpr unsigned char kCollapsedMark = 0xD4;
constexpr unsigned char kCollapsedSymbol = 0xD5;
// Non-ASCII whitespace becomes a vertical tab, which the ECMAScript \s matches.
constexpr unsigned char kCollapsedSpace = 0x0B;
const char* const kAsciiSpaces = R"(\t\n\x0B\f\r )";

unsigned char collapse_codepoint(uint32_t codepoint) {
  if (codepoint < 128) return static_cast<unsigned char>(codepoint);
  if (unicode::is_whitespace(codepoint)) return kCollapsedSpace;
  switch (unicode::category(codepoint)) {
    case unicode::Category::letter:
      return kCollapsedLetter;
    case unicode::Category::number:
      return kCollapsedNumber;
    case unicode::Category::punctuation:
      return kCollapsedPunctuation;
    case unicode::Category::mark:
      return kCollapsedMark;
    case unicode::Category::symbol:
      return kCollapsedSymbol;
    default:
      return kCollapsedOther;
  }
}

// The class members \p{X} stands for in collapsed text, or nullptr for a category llama.cpp
// does not collapse.
const char* category_members(char category) {
  switch (category) {
    case 'N':
      return R"(\x{D1}0-9)";
    case 'L':
      return R"(\x{D2}A-Za-z)";
    case 'P':
      return R"(\x{D3}!-#%-*,-/:-;?-@\[-\]_\{\})";
    case 'M':
      return R"(\x{D4})";
    case 'S':
      return R"(\x{D5}\$\+<->\^`\|)";
    default:
      return nullptr;
  }
}

bool names_category(const std::string& expression) {
  for (const char* category : {R"(\p{N})", R"(\p{L})", R"(\p{P})", R"(\p{M})", R"(\p{S})"}) {
    if (expression.find(category) != std::string::npos) return true;
  }
  return false;
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

// An ECMAScript expression as llama.cpp runs it, in RE2's syntax. RE2 has no look-ahead:
// Tekken's "a letter that is not a-z" becomes the collapsed class it amounts to, and
// \s+(?!\S) becomes a named group that the splitter shortens by hand.
std::string to_re2(std::string expression, bool collapse, bool& has_trailing_space) {
  replace_all(expression, R"(((?=[\p{L}])([^a-z])))", R"(([\x{D2}A-Z]))");
  replace_all(expression, R"(((?=[\p{L}])([^A-Z])))", R"(([\x{D2}a-z]))");
  const std::string lookahead = R"(\s+(?!\S))";
  has_trailing_space = expression.find(lookahead) != std::string::npos;
  replace_all(expression, lookahead, R"((?P<trailing_space>\s+))");
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < expression.size(); ++i) {
    char c = expression[i];
    if (c == '\\' && i + 1 < expression.size()) {
      char next = expression[i + 1];
      const char* members = nullptr;
      if (next == 's') {
        members = kAsciiSpaces;
      } else if (collapse && next == 'p' && i + 4 < expression.size() && expression[i + 2] == '{' &&
                 expression[i + 4] == '}') {
        members = category_members(expression[i + 3]);
        if (members) i += 3;
      }
      if (members) {
        out += in_class ? std::string(members) : "[" + std::string(members) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kAsciiSpaces) + "]";
      } else {
        out += c;
        out += next;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// Letters, numbers and whitespace of each code point, for the hand-written splitters.
enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

// The text in the forms the steps need, each computed once.
struct Subject {
  std::vector<uint32_t> codepoints;
  std::vector<uint8_t> classes;
  std::string collapsed;               // one byte per code point
  std::string spaced;                  // UTF-8 with non-ASCII whitespace as \x0B
  std::vector<size_t> spaced_offsets;  // code point index -> byte offset in `spaced`, and the end

  explicit Subject(std::string_view text) : codepoints(unicode::decode_as_llama(text)) {
    classes.reserve(codepoints.size());
    for (uint32_t c : codepoints) {
      uint8_t bits = unicode::is_whitespace(c) ? kSpace : 0;
      unicode::Category category = unicode::category(c);
      if (category == unicode::Category::letter) bits |= kLetter;
      if (category == unicode::Category::number) bits |= kNumber;
      classes.push_back(bits);
    }
  }
  const std::string& collapsed_text() {
    if (collapsed.empty()) {
      collapsed.reserve(codepoints.size());
      for (uint32_t c : codepoints)
        collapsed += static_cast<char>(collapse_codepoint(c));
    }
    return collapsed;
  }
  const std::string& spaced_text() {
    if (spaced_offsets.empty()) {
      spaced_offsets.reserve(codepoints.size() + 1);
      for (uint32_t c : codepoints) {
        spaced_offsets.push_back(spaced.size());
        if (c >= 128 && unicode::is_whitespace(c)) {
          spaced += static_cast<char>(kCollapsedSpace);
        } else if (c >= 0xD800 && c <= 0xDFFF) {
          // A surrogate (llama.cpp decodes ED A0 80 to U+D800) is no UTF-8 that RE2 can match;
          // a private-use character stands in: no expression here names either.
          unicode::append_utf8(spaced, 0xE000);
        } else {
          unicode::append_utf8(spaced, c);
        }
      }
      spaced_offsets.push_back(spaced.size());
    }
    return spaced;
  }
  size_t codepoint_at(size_t byte_offset) const {
    return static_cast<size_t>(
        std::lower_bound(spaced_offsets.begin(), spaced_offsets.end(), byte_offset) -
        spaced_offsets.begin());
  }
};

bool is_contraction_letter(uint32_t c) {
  return c == 's' || c == 't' || c == 'm' || c == 'd';
}

bool is_contraction_pair(uint32_t first, uint32_t second) {
  return (first == 'r' && second == 'e') || (first == 'v' && second == 'e') ||
         (first == 'l' && second == 'l');
}

// 's|'t|'re|'ve|'m|'ll|'d, case-insensitive for Llama 3: the length of the contraction at
// `position`, or 0.
size_t contraction_length(const Subject& s, size_t position, size_t end, bool any_case) {
  if (s.codepoints[position] != '\'' || position + 1 >= end) return 0;
  auto fold = [&](size_t at) {
    return any_case ? unicode::to_lower(s.codepoints[at]) : s.codepoints[at];
  };
  if (is_contraction_letter(fold(position + 1))) return 2;
  if (position + 2 < end && is_contraction_pair(fold(position + 1), fold(position + 2))) return 3;
  return 0;
}

// The end of the whitespace at `position`, for \s+(?!\S)|\s+: a run followed by more text
// leaves its last character to the next word.
size_t whitespace_end(const Subject& s, size_t position, size_t end) {
  size_t run = position;
  while (run < end && (s.classes[run] & kSpace))
    ++run;
  if (run - position > 1 && run < end) return run - 1;
  return std::max(run, position + 1);
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2_words(const Subject& s, Range piece, std::vector<Range>& out) {
  auto [position, end] = piece;
  while (position < end) {
    size_t next = position;
    size_t lead = s.codepoints[position] == ' ' ? position + 1 : position;
    if (size_t length = contraction_length(s, position, end, false)) {
      next = position + length;
    } else if (lead < end && (s.classes[lead] & (kLetter | kNumber))) {
      uint8_t kind = s.classes[lead] & kLetter ? kLetter : kNumber;
      next = lead;
      while (next < end && (s.classes[next] & kind))
        ++next;
    } else if (lead < end && s.classes[lead] == 0) {
      next = lead;
      while (next < end && s.classes[next] == 0)
        ++next;
    } else {
      next = whitespace_end(s, position, end);
    }
    out.push_back({position, next});
    position = next;
  }
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3_words(const Subject& s, Range piece, std::vector<Range>& out) {
  auto [position, end] = piece;
  auto is_line_break = [&](size_t at) {
    return s.codepoints[at] == '\r' || s.codepoints[at] == '\n';
  };
  while (position < end) {
    size_t next = position;
    size_t lead = s.codepoints[position] == ' ' ? position + 1 : position;
    if (size_t length = contraction_length(s, position, end, true)) {
      next = position + length;
    } else if (!is_line_break(position) && !(s.classes[position] & kNumber) &&
               ((s.classes[position] & kLetter) ||
                (position + 1 < end && (s.classes[position + 1] & kLetter)))) {
      next = position + 1;
      while (next < end && (s.classes[next] & kLetter))
        ++next;
    } else if (s.classes[position] & kNumber) {
      next = position;
      while (next < end && next - position < 3 && (s.classes[next] & kNumber))
        ++next;
    } else if (lead < end && s.classes[lead] == 0) {
      next = lead;
      while (next < end && s.classes[next] == 0)
        ++next;
      while (next < end && is_line_break(next))
        ++next;
    } else {
      size_t run = position;
      size_t after_line_break = 0;
      while (run < end && (s.classes[run] & kSpace)) {
        if (is_line_break(run)) after_line_break = run + 1;
        ++run;
      }
      next = after_line_break > 0 ? after_line_break : whitespace_end(s, position, end);
    }
    out.push_back({position, next});
    position = next;
  }
}

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { gpt2_words, llama3_words, collapsed_expression, codepoint_expression };
  Kind kind = Kind::gpt2_words;
  std::unique_ptr<re2::RE2> expression;
  int trailing_space_group = 0;  // capture group standing for \s+(?!\S), or 0

  // Splits each of `pieces` by the expression; the text between matches stays a piece too.
  void split_by_expression(Subject& subject, const std::vector<Range>& pieces,
                           std::vector<Range>& out) const {
    bool collapse = kind == Kind::collapsed_expression;
    const std::string& text = collapse ? subject.collapsed_text() : subject.spaced_text();
    auto byte_at = [&](size_t codepoint) {
      return collapse ? codepoint : subject.spaced_offsets[codepoint];
    };
    auto codepoint_at = [&](size_t byte) { return collapse ? byte : subject.codepoint_at(byte); };
    std::vector<re2::StringPiece> groups(static_cast<size_t>(trailing_space_group) + 1);
    for (auto [first, last] : pieces) {
      size_t base = byte_at(first);
      re2::StringPiece input(text.data() + base, byte_at(last) - base);
      size_t position = 0;  // bytes into `input`
      while (position < input.size() &&
             expression->Match(input, position, input.size(), re2::RE2::UNANCHORED, groups.data(),
                               static_cast<int>(groups.size()))) {
        size_t begin = static_cast<size_t>(groups[0].data() - input.data());
        size_t end = begin + groups[0].size();
        if (end == begin) {  // an empty match splits nothing; step over one character
          position = byte_at(codepoint_at(base + begin) + 1) - base;
          continue;
        }
        // \s+(?!\S) before more text: the run's last character (one byte: whitespace is ASCII
        // here) goes to the next word.
        if (trailing_space_group > 0 && groups.back().data() != nullptr && end < input.size() &&
            groups.back().size() > 1) {
          --end;
        }
        if (begin > position)
          out.push_back({codepoint_at(base + position), codepoint_at(base + begin)});
        out.push_back({codepoint_at(base + begin), codepoint_at(base + end)});
        position = end;
      }
      if (position < input.size()) out.push_back({codepoint_at(base + position), last});
    }
  }
};

PreTokenizer::PreTokenizer(const std::string& name) {
  const PreTokenizerFamily* family = find_pre_tokenizer(name);
  if (family == nullptr) {
    throw std::invalid_argument("pre-tokenizer '" + name + "' is not supported (supported: " +
                                supported_pre_tokenizers() + ")");
  }
  for (const std::string& source : *family->expressions) {
    auto step = std::make_unique<Step>();
    if (source == kGpt2WordExpression) {
      step->kind = Step::Kind::gpt2_words;
    } else if (source == kLlama3WordExpression) {
      step->kind = Step::Kind::llama3_words;
    } else {
      bool collapse = names_category(source);
      step->kind = collapse ? Step::Kind::collapsed_expression : Step::Kind::codepoint_expression;
      re2::RE2::Options options;
      options.set_log_errors(false);
      if (collapse) options.set_encoding(re2::RE2::Options::EncodingLatin1);
      bool has_trailing_space = false;
      step->expression =
          std::make_unique<re2::RE2>(to_re2(source, collapse, has_trailing_space), options);
      if (!step->expression->ok()) {
        throw std::logic_error("pre-tokenizer '" + name + "': expression " + source +
                               " does not compile: " + step->expression->error());
      }
      if (has_trailing_space)
        step->trailing_space_group = step->expression->NamedCapturingGroups().at("trailing_space");
    }
    steps_.push_back(std::move(step));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> words;
  if (text.empty()) return words;
  Subject subject(text);
  std::vector<Range> pieces = {{0, subject.codepoints.size()}};
  for (const auto& step : steps_) {
    std::vector<Range> next;
    next.reserve(pieces.size() * 2);
    switch (step->kind) {
      case Step::Kind::gpt2_words:
        for (Range piece : pieces)
          split_gpt2_words(subject, piece, next);
        break;
      case Step::Kind::llama3_words:
        for (Range piece : pieces)
          split_llama3_words(subject, piece, next);
        break;
      default:
        step->split_by_expression(subject, pieces, next);
        break;
    }
    pieces = std::move(next);
  }
  words.reserve(pieces.size());
  for (auto [first, last] : pieces) {
    std::string word;
    for (size_t i = first; i < last; ++i)
      unicode::append_utf8(word, subject.codepoints[i]);
    words.push_back(std::move(word));
  }
  return words;
}

}  // namespace chatflow::engine
