#include "framework/moderation/rule_list.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <re2/re2.h>
#include <re2/set.h>
#include <utf8proc.h>

#include "framework/text/normalizer.h"
#include "framework/text/utf8.h"

namespace chatflow::moderation {
namespace {

// Phrases match a projection of the normalised text in which every character that is not a
// letter or digit is one byte, kSeparator: the separators of a phrase are then one byte class,
// not the thousands of UTF-8 ranges of [^\pL\pN] (which made a list of 60 phrases take
// seconds and half a gigabyte to refuse).
constexpr char kSeparator = '\x01';
constexpr const char* kSeparators = "\\x01{0,3}";
constexpr const char* kBefore = "(?:^|\\x01)";
constexpr const char* kAfter = "(?:$|\\x01)";

bool letter_or_digit(utf8proc_int32_t c) {
  auto category = utf8proc_category(c);
  return (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
         (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
}

// Scripts written without spaces between words: a phrase there matches anywhere.
bool unspaced_script(utf8proc_int32_t c) {
  return (c >= 0x2E80 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x20000 && c <= 0x3FFFF) ||
         (c >= 0x3040 && c <= 0x30FF);
}

re2::RE2::Options rule_options() {
  re2::RE2::Options options;
  options.set_encoding(re2::RE2::Options::EncodingUTF8);
  options.set_case_sensitive(false);
  options.set_log_errors(false);
  options.set_max_mem(64 << 20);
  return options;
}

std::string error_kind(re2::RE2::ErrorCode code) {
  switch (code) {
    case re2::RE2::ErrorBadEscape:
      return "bad escape sequence";
    case re2::RE2::ErrorBadCharClass:
    case re2::RE2::ErrorMissingBracket:
      return "bad or unclosed character class";
    case re2::RE2::ErrorBadCharRange:
      return "bad character class range";
    case re2::RE2::ErrorMissingParen:
    case re2::RE2::ErrorUnexpectedParen:
      return "unbalanced parentheses";
    case re2::RE2::ErrorTrailingBackslash:
      return "trailing backslash";
    case re2::RE2::ErrorRepeatArgument:
    case re2::RE2::ErrorRepeatOp:
      return "a repetition with nothing to repeat";
    case re2::RE2::ErrorRepeatSize:
      return "a repetition count too large";
    case re2::RE2::ErrorBadPerlOp:
      return "unsupported Perl syntax (RE2 has no look-around or backreferences)";
    case re2::RE2::ErrorPatternTooLarge:
      return "pattern too large";
    default:
      return "syntax error";
  }
}

}  // namespace

std::string phrase_pattern(std::string_view phrase) {
  std::string normalized = text::normalize(phrase).text;
  std::vector<utf8proc_int32_t> letters;
  for (const text::Codepoint& character : text::decode(normalized)) {
    if (character.value == text::kInvalid) break;
    auto c = static_cast<utf8proc_int32_t>(character.value);
    if (letter_or_digit(c)) letters.push_back(c);  // spaces and punctuation become separators
  }
  if (letters.empty()) return {};
  std::string body;
  for (size_t i = 0; i < letters.size(); ++i) {
    utf8proc_uint8_t bytes[4];
    auto length = utf8proc_encode_char(letters[i], bytes);
    body += re2::RE2::QuoteMeta(
        std::string(reinterpret_cast<char*>(bytes), static_cast<size_t>(length)));
    if (i + 1 < letters.size()) body += kSeparators;
  }
  std::string pattern;
  if (!unspaced_script(letters.front())) pattern += kBefore;
  pattern += "(" + body + ")";
  if (!unspaced_script(letters.back())) pattern += kAfter;
  return pattern;
}

// The normalised text as phrase rules see it, and where each of its bytes came from.
struct RuleList::Projection {
  std::string text;
  std::vector<size_t> origin;  // per byte of `text`: its byte in the normalised text
};

RuleList::Projection RuleList::project(std::string_view normalized) {
  Projection projection;
  projection.text.reserve(normalized.size());
  projection.origin.reserve(normalized.size());
  for (const text::Codepoint& character : text::decode(normalized)) {
    bool kept = character.value != text::kInvalid &&
                letter_or_digit(static_cast<utf8proc_int32_t>(character.value));
    if (!kept) {
      projection.text += kSeparator;
      projection.origin.push_back(character.offset);
      continue;
    }
    for (uint32_t i = 0; i < character.length; ++i) {
      projection.text += normalized[character.offset + i];
      projection.origin.push_back(character.offset + i);
    }
  }
  return projection;
}

struct RuleList::Set {
  re2::RE2::Set rules{rule_options(), re2::RE2::UNANCHORED};
};

RuleList::~RuleList() = default;

void RuleList::add(const std::string& source, const std::string& pattern, bool whole,
                   const std::string& where) {
  // Group 1 is what a match covers: the whole match of a pattern, a phrase without the
  // characters around it that make it a whole word.
  auto rule = std::make_unique<re2::RE2>(whole ? "(" + pattern + ")" : pattern, rule_options());
  // RE2's own message quotes the pattern: a list pointed at the wrong file would show its
  // contents to whoever reads the error (an admin over HTTP, a log). The kind and the line only.
  if (!rule->ok()) {
    throw std::runtime_error(where + ": error: not a valid RE2 pattern (" +
                             error_kind(rule->error_code()) + ")");
  }
  std::string ignored;
  if (set_->rules.Add(pattern, &ignored) < 0) {
    throw std::runtime_error(where + ": error: not a valid RE2 pattern");
  }
  sources_.push_back(source);
  rules_.push_back(std::move(rule));
}

void RuleList::compile(const std::string& where) {
  if (rules_.empty()) return;
  if (!set_->rules.Compile())
    throw std::runtime_error(where + ": error: the rules do not compile together (too large)");
}

std::shared_ptr<const RuleList> RuleList::load(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(path + ": error: cannot read this rule list");
  bool patterns = path.size() > 9 && path.compare(path.size() - 9, 9, ".patterns") == 0;
  std::shared_ptr<RuleList> list(new RuleList());
  list->name_ = std::filesystem::path(path).stem().string();
  list->phrases_ = !patterns;
  list->set_ = std::make_unique<Set>();
  std::string line;
  int number = 0;
  while (std::getline(file, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    std::string text = line.substr(first);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
      text.pop_back();
    std::string where = path + ":" + std::to_string(number) + ":1";
    std::string pattern = patterns ? text : phrase_pattern(text);
    if (pattern.empty()) throw std::runtime_error(where + ": error: the phrase has no letters");
    list->add(text, pattern, patterns, where);
  }
  list->compile(path);
  return list;
}

std::shared_ptr<const RuleList> RuleList::from_phrases(std::string name,
                                                       const std::vector<std::string>& phrases) {
  std::shared_ptr<RuleList> list(new RuleList());
  list->name_ = std::move(name);
  list->phrases_ = true;
  list->set_ = std::make_unique<Set>();
  for (const auto& phrase : phrases)
    list->add(phrase, phrase_pattern(phrase), false, list->name_);
  list->compile(list->name_);
  return list;
}

std::shared_ptr<const RuleList> RuleList::from_patterns(std::string name,
                                                        const std::vector<std::string>& patterns) {
  std::shared_ptr<RuleList> list(new RuleList());
  list->name_ = std::move(name);
  list->set_ = std::make_unique<Set>();
  for (const auto& pattern : patterns)
    list->add(pattern, pattern, true, list->name_);
  list->compile(list->name_);
  return list;
}

bool RuleList::matches(std::string_view normalized) const {
  if (rules_.empty()) return false;
  std::vector<int> hits;
  if (phrases_) {
    Projection projection = project(normalized);
    return set_->rules.Match(re2::StringPiece(projection.text.data(), projection.text.size()),
                             &hits);
  }
  return set_->rules.Match(re2::StringPiece(normalized.data(), normalized.size()), &hits);
}

std::vector<RuleMatch> RuleList::find_all(std::string_view normalized) const {
  if (!phrases_) return find_all_in(normalized);
  Projection projection = project(normalized);
  std::vector<RuleMatch> found = find_all_in(projection.text);
  // A phrase's match begins and ends with a letter, whose bytes are the normalised text's.
  for (RuleMatch& match : found) {
    size_t last = match.end - 1;
    match.begin = projection.origin[match.begin];
    match.end = projection.origin[last] + 1;
  }
  return found;
}

std::vector<RuleMatch> RuleList::find_all_in(std::string_view normalized) const {
  std::vector<RuleMatch> found;
  if (rules_.empty()) return found;
  std::vector<int> hits;
  if (!set_->rules.Match(re2::StringPiece(normalized.data(), normalized.size()), &hits))
    return found;
  for (int index : hits) {
    const re2::RE2& rule = *rules_[static_cast<size_t>(index)];
    re2::StringPiece text(normalized.data(), normalized.size());
    re2::StringPiece groups[2];
    size_t start = 0;
    while (start <= normalized.size() &&
           rule.Match(text, start, normalized.size(), re2::RE2::UNANCHORED, groups, 2)) {
      size_t begin = static_cast<size_t>(groups[1].data() - normalized.data());
      size_t end = begin + groups[1].size();
      found.push_back({static_cast<size_t>(index), begin, end});
      // Look again from the character after this match's start.
      start = begin < normalized.size()
                  ? begin + text::sequence_length(static_cast<unsigned char>(normalized[begin]))
                  : begin + 1;
    }
  }
  std::sort(found.begin(), found.end(),
            [](const RuleMatch& a, const RuleMatch& b) { return a.begin < b.begin; });
  return found;
}

}  // namespace chatflow::moderation
