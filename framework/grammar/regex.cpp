// The regex parser (pattern -> tree) and its emitter (tree -> grammar expression).
#include "framework/grammar/regex.h"

#include <map>
#include <string>

#include "framework/grammar/grammar_node.h"
#include "framework/text/utf8.h"

namespace chatflow::grammar {
namespace {

using Expr = GrammarBuilder::Expr;

constexpr int kMaxGroupDepth = 64;
constexpr int kMaxCount = 1000;
constexpr size_t kMaxPatternLength = 10'000;
constexpr int64_t kMaxWays = 4096;

struct RegexNode {
  enum class Kind { chars, concat, alternation, repeat };
  Kind kind = Kind::concat;
  std::vector<CodepointRange> ranges;
  std::vector<RegexNode> children;
  int min = 0;
  int max = 0;
};

struct Branch {
  RegexNode body;
  bool anchored_start = false;
  bool anchored_end = false;
};

[[noreturn]] void fail(const std::string& message) {
  throw SchemaError("pattern", "", message);
}

const std::vector<CodepointRange> kDigits = {{'0', '9'}};
const std::vector<CodepointRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodepointRange> kSpace = {{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}};

class RegexParser {
 public:
  explicit RegexParser(std::string_view pattern) {
    if (pattern.size() > kMaxPatternLength)
      fail("longer than " + std::to_string(kMaxPatternLength) + " bytes");
    if (auto bad = text::first_invalid_byte(pattern))
      fail("not UTF-8 at byte " + std::to_string(*bad));
    text_ = text::to_code_points(pattern);
  }

  std::vector<Branch> parse() {
    std::vector<Branch> branches;
    while (true) {
      Branch branch;
      if (peek() == '^') {
        ++at_;
        branch.anchored_start = true;
      }
      branch.body = concatenation(0, &branch.anchored_end);
      branches.push_back(std::move(branch));
      if (done()) break;
      if (peek() == ')') fail("unbalanced ')' at " + position());
      ++at_;  // '|'
    }
    return branches;
  }

 private:
  bool done() const { return at_ >= text_.size(); }
  char32_t peek() const { return done() ? 0 : text_[at_]; }
  std::string position() const { return "offset " + std::to_string(at_); }

  RegexNode alternation(int depth) {
    if (depth > kMaxGroupDepth) fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
    RegexNode node;
    node.kind = RegexNode::Kind::alternation;
    node.children.push_back(concatenation(depth, nullptr));
    while (peek() == '|') {
      ++at_;
      node.children.push_back(concatenation(depth, nullptr));
    }
    return node.children.size() == 1 ? std::move(node.children[0]) : node;
  }

  // `anchored_end` is non-null only for a top-level branch, where a final '$' is allowed.
  RegexNode concatenation(int depth, bool* anchored_end) {
    RegexNode node;
    node.kind = RegexNode::Kind::concat;
    while (!done() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && anchored_end != nullptr &&
          (at_ + 1 == text_.size() || text_[at_ + 1] == '|')) {
        ++at_;
        *anchored_end = true;
        break;
      }
      RegexNode atom = this->atom(depth);
      node.children.push_back(quantified(std::move(atom)));
    }
    return node;
  }

  RegexNode atom(int depth) {
    char32_t c = text_[at_++];
    switch (c) {
      case '(':
        return group(depth);
      case '[':
        return chars(character_class());
      case '.':
        return chars(normalize_ranges({{'\n', '\n'}}, true));
      case '\\':
        return chars(escape(false));
      case '^':
      case '$':
        fail(std::string("anchor '") + static_cast<char>(c) + "' is supported only at the ends, " +
             position());
      case '*':
      case '+':
      case '?':
      case '{':
        fail("nothing to repeat at " + position());
      default:
        return chars({{c, c}});
    }
  }

  RegexNode group(int depth) {
    if (peek() == '?') {
      ++at_;
      if (peek() == ':') {
        ++at_;
      } else if (peek() == 'P' || (peek() == '<' && at_ + 1 < text_.size() &&
                                   text_[at_ + 1] != '=' && text_[at_ + 1] != '!')) {
        if (peek() == 'P') ++at_;
        if (peek() != '<') fail("unsupported group syntax at " + position());
        while (!done() && peek() != '>')
          ++at_;
        if (done()) fail("unterminated group name");
        ++at_;
      } else {
        fail("lookaround and inline flags are not supported (at " + position() + ")");
      }
    }
    RegexNode inner = alternation(depth + 1);
    if (peek() != ')') fail("missing ')'");
    ++at_;
    return inner;
  }

  static RegexNode chars(std::vector<CodepointRange> ranges) {
    RegexNode node;
    node.kind = RegexNode::Kind::chars;
    node.ranges = std::move(ranges);
    return node;
  }

  RegexNode quantified(RegexNode atom) {
    if (done()) return atom;
    int min = 0;
    int max = 0;
    char32_t c = peek();
    if (c == '*') {
      max = -1;
    } else if (c == '+') {
      min = 1;
      max = -1;
    } else if (c == '?') {
      max = 1;
    } else if (c == '{') {
      ++at_;
      min = number();
      max = min;
      if (peek() == ',') {
        ++at_;
        max = peek() == '}' ? -1 : number();
      }
      if (peek() != '}') fail("malformed {n,m} at " + position());
      if (max >= 0 && max < min) fail("{n,m} with m < n at " + position());
    } else {
      return atom;
    }
    ++at_;
    if (peek() == '?') ++at_;  // lazy: the same language
    if (peek() == '+') fail("possessive quantifiers are not supported");
    if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')
      fail("bad repetition at " + position());
    RegexNode node;
    node.kind = RegexNode::Kind::repeat;
    node.min = min;
    node.max = max;
    node.children.push_back(std::move(atom));
    return node;
  }

  int number() {
    int value = 0;
    size_t start = at_;
    while (!done() && peek() >= '0' && peek() <= '9') {
      value = value * 10 + static_cast<int>(peek() - '0');
      if (value > kMaxCount) fail("repeat count above " + std::to_string(kMaxCount));
      ++at_;
    }
    if (at_ == start) fail("expected a number at " + position());
    return value;
  }

  uint32_t hex_digits(size_t count) {
    uint32_t value = 0;
    for (size_t i = 0; i < count; ++i) {
      if (done()) fail("truncated escape");
      char32_t c = text_[at_++];
      int digit = c >= '0' && c <= '9'   ? static_cast<int>(c - '0')
                  : c >= 'a' && c <= 'f' ? static_cast<int>(c - 'a' + 10)
                  : c >= 'A' && c <= 'F' ? static_cast<int>(c - 'A' + 10)
                                         : -1;
      if (digit < 0) fail("bad hex digit in escape at " + position());
      value = value * 16 + static_cast<uint32_t>(digit);
    }
    return value;
  }

  // After a backslash: the code points the escape stands for.
  std::vector<CodepointRange> escape(bool in_class) {
    if (done()) fail("trailing backslash");
    char32_t c = text_[at_++];
    auto one = [](uint32_t cp) { return std::vector<CodepointRange>{{cp, cp}}; };
    switch (c) {
      case 'd':
        return kDigits;
      case 'D':
        return normalize_ranges(kDigits, true);
      case 'w':
        return kWord;
      case 'W':
        return normalize_ranges(kWord, true);
      case 's':
        return kSpace;
      case 'S':
        return normalize_ranges(kSpace, true);
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 't':
        return one('\t');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case 'x': {
        uint32_t value;
        if (peek() == '{') {
          ++at_;
          value = 0;
          size_t digits = 0;
          while (peek() != '}') {
            value = value * 16 + hex_digits(1);
            if (++digits > 6) fail("malformed \\x{...}");
          }
          if (digits == 0) fail("malformed \\x{...}");
          ++at_;
        } else {
          value = hex_digits(2);
        }
        if (value > kMaxCodepoint || (value >= 0xD800 && value <= 0xDFFF))
          fail("escape names no valid code point");
        return one(value);
      }
      case 'u': {
        uint32_t value = hex_digits(4);
        if (value >= 0xD800 && value <= 0xDFFF) fail("surrogate escapes are not supported");
        return one(value);
      }
      default:
        break;
    }
    if (c >= '1' && c <= '9') fail("backreferences are not supported");
    if (c == 'b' && in_class) return one('\b');
    if (c < 128 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
      return one(c);  // escaped punctuation stands for itself
    fail(std::string("unsupported escape \\") +
         (c < 128 ? std::string(1, static_cast<char>(c)) : "") +
         " (word boundaries, \\p classes, assertions)");
  }

  std::vector<CodepointRange> character_class() {
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++at_;
    }
    std::vector<CodepointRange> ranges;
    bool first = true;
    while (true) {
      if (done()) fail("missing ']'");
      char32_t c = text_[at_];
      if (c == ']' && !first) break;
      first = false;
      if (c == '[' && at_ + 1 < text_.size() && text_[at_ + 1] == ':')
        fail("POSIX classes like [:alpha:] are not supported");
      ++at_;
      std::vector<CodepointRange> item;
      if (c == '\\')
        item = escape(true);
      else
        item = {{c, c}};
      bool single = item.size() == 1 && item[0].first == item[0].last;
      if (single && peek() == '-' && at_ + 1 < text_.size() && text_[at_ + 1] != ']') {
        ++at_;
        char32_t d = text_[at_++];
        std::vector<CodepointRange> upper =
            d == '\\' ? escape(true) : std::vector<CodepointRange>{{d, d}};
        if (upper.size() != 1 || upper[0].first != upper[0].last) fail("bad range in class");
        if (upper[0].first < item[0].first) fail("range out of order in class");
        item = {{item[0].first, upper[0].first}};
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    ++at_;  // ']'
    return normalize_ranges(std::move(ranges), negated);
  }

  std::u32string text_;
  size_t at_ = 0;
};

bool nullable(const RegexNode& node) {
  switch (node.kind) {
    case RegexNode::Kind::chars:
      return false;
    case RegexNode::Kind::concat:
      for (const RegexNode& child : node.children)
        if (!nullable(child)) return false;
      return true;
    case RegexNode::Kind::alternation:
      for (const RegexNode& child : node.children)
        if (nullable(child)) return true;
      return false;
    case RegexNode::Kind::repeat:
      return node.min == 0 || nullable(node.children[0]);
  }
  return false;
}

class RegexEmitter {
 public:
  RegexEmitter(GrammarBuilder& builder, RegexText text) : builder_(builder), text_(text) {}

  // `ways`: the product of the counted repeats around `node`. Nested counts multiply the
  // readings a matcher keeps at once ((a{1,100}){1,100} splits a run of a's 10^4 ways), so
  // their product is bounded.
  Expr emit(const RegexNode& node, int64_t ways = 1) {
    switch (node.kind) {
      case RegexNode::Kind::chars:
        return chars(node.ranges);
      case RegexNode::Kind::concat:
      case RegexNode::Kind::alternation: {
        std::vector<Expr> items;
        for (const RegexNode& child : node.children)
          items.push_back(emit(child, ways));
        return node.kind == RegexNode::Kind::concat ? builder_.sequence(std::move(items))
                                                    : builder_.choice(std::move(items));
      }
      case RegexNode::Kind::repeat: {
        if (node.max != 1 && nullable(node.children[0]))
          fail("a repeat of something that can match the empty text is not supported");
        if (node.max > 1) ways *= node.max;
        if (ways > kMaxWays)
          fail("nested counted repeats allow more than " + std::to_string(kMaxWays) +
               " ways to match");
        return builder_.repeat(emit(node.children[0], ways), node.min, node.max);
      }
    }
    return builder_.empty();
  }

  Expr chars(const std::vector<CodepointRange>& ranges) {
    auto [it, inserted] = memo_.try_emplace(ranges);
    if (inserted) it->second = encode_chars(builder_, ranges, text_);
    return it->second;
  }

 private:
  GrammarBuilder& builder_;
  RegexText text_;
  std::map<std::vector<CodepointRange>, Expr> memo_;
};

// How JSON writes a character it must escape: `\` then one of these, or `\u00` and two
// lowercase hex digits.
char short_escape(uint32_t c) {
  switch (c) {
    case '"':
      return '"';
    case '\\':
      return '\\';
    case '\b':
      return 'b';
    case '\f':
      return 'f';
    case '\n':
      return 'n';
    case '\r':
      return 'r';
    case '\t':
      return 't';
    default:
      return 0;
  }
}

// The escapes of the characters in `escaped` (each below 0x60), as one expression shaped like a
// trie: `\` (a short escape | u00 (0 digit | 1 digit)), so that a matcher following it keeps at
// most two readings where a choice of thirty literals would keep thirty.
Expr escapes(GrammarBuilder& builder, const std::vector<uint32_t>& escaped) {
  std::vector<CodepointRange> shorts;
  std::vector<CodepointRange> low_digits[2];  // \u000X, \u001X
  constexpr char kHex[] = "0123456789abcdef";
  for (uint32_t c : escaped) {
    if (char letter = short_escape(c)) {
      shorts.push_back({static_cast<uint32_t>(letter), static_cast<uint32_t>(letter)});
    } else {
      auto digit = static_cast<uint32_t>(kHex[c & 15]);
      low_digits[c >> 4].push_back({digit, digit});
    }
  }
  std::vector<Expr> after_backslash;
  if (!shorts.empty()) after_backslash.push_back(builder.chars(shorts));
  std::vector<Expr> after_u00;
  for (uint32_t high = 0; high < 2; ++high) {
    if (low_digits[high].empty()) continue;
    after_u00.push_back(builder.sequence(
        {builder.literal(std::string(1, kHex[high])), builder.chars(low_digits[high])}));
  }
  if (!after_u00.empty())
    after_backslash.push_back(
        builder.sequence({builder.literal("u00"), builder.choice(std::move(after_u00))}));
  return builder.sequence({builder.literal("\\"), builder.choice(std::move(after_backslash))});
}

}  // namespace

Expr encode_chars(GrammarBuilder& builder, const std::vector<CodepointRange>& ranges,
                  RegexText text) {
  if (text == RegexText::plain) return builder.chars(ranges);
  std::vector<CodepointRange> safe;
  std::vector<Expr> alternatives;
  std::vector<uint32_t> escaped;
  for (CodepointRange range : ranges) {
    for (uint32_t c = range.first; c <= std::min<uint32_t>(range.last, 0x5C); ++c)
      if (c < 0x20 || c == '"' || c == '\\') escaped.push_back(c);
    safe.push_back(range);
  }
  if (!escaped.empty()) alternatives.push_back(escapes(builder, escaped));
  safe = normalize_ranges(std::move(safe), false);
  std::vector<CodepointRange> specials = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  std::vector<CodepointRange> allowed;
  for (CodepointRange range : safe) {  // safe minus specials
    uint32_t next = range.first;
    for (CodepointRange special : specials) {
      if (special.last < next || special.first > range.last) continue;
      if (special.first > next) allowed.push_back({next, special.first - 1});
      next = special.last + 1;
    }
    if (next <= range.last) allowed.push_back({next, range.last});
  }
  if (!allowed.empty()) alternatives.insert(alternatives.begin(), builder.chars(allowed));
  return builder.choice(std::move(alternatives));
}

Expr compile_regex(GrammarBuilder& builder, std::string_view pattern, RegexText text, bool search) {
  std::vector<Branch> branches = RegexParser(pattern).parse();
  RegexEmitter emitter(builder, text);
  Expr anything = builder.repeat(emitter.chars(normalize_ranges({}, true)), 0, -1);
  std::vector<Expr> alternatives;
  for (const Branch& branch : branches) {
    // A body that can match nothing is found in any text (with either end free): the branch is
    // just `anything`, which a matcher follows as one reading rather than one per start and
    // length (.{0,1000} unanchored would keep a thousand readings alive).
    if (search && nullable(branch.body) && !(branch.anchored_start && branch.anchored_end)) {
      emitter.emit(branch.body);  // still refused where it would be refused whole
      alternatives.push_back(anything);
      continue;
    }
    std::vector<Expr> parts;
    if (search && !branch.anchored_start) parts.push_back(anything);
    parts.push_back(emitter.emit(branch.body));
    if (search && !branch.anchored_end) parts.push_back(anything);
    alternatives.push_back(builder.sequence(std::move(parts)));
  }
  return builder.choice(std::move(alternatives));
}

Expr GrammarBuilder::regex(std::string_view pattern) {
  return compile_regex(*this, pattern, RegexText::plain, false);
}

}  // namespace chatflow::grammar
