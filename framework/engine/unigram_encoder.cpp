#include "framework/engine/unigram_encoder.h"

#include <algorithm>
#include <cfloat>
#include <stdexcept>

#include "framework/engine/unicode.h"

namespace chatflow::engine {
namespace {

const std::string kEscapedSpace = "\xE2\x96\x81";
const std::string_view kReplacementCharacter = "\xEF\xBF\xBD";
// llama.cpp's penalty below the lowest normal score for a code point no token covers.
constexpr float kUnknownPenalty = 10.0f;

PrecompiledCharsmap read_charsmap(const Vocabulary& vocabulary) {
  if (vocabulary.precompiled_charsmap.empty()) return {};
  try {
    return PrecompiledCharsmap(vocabulary.precompiled_charsmap);
  } catch (const std::invalid_argument& error) {
    throw GgufError(std::string("tokenizer.ggml.precompiled_charsmap: ") + error.what());
  }
}

}  // namespace

UnigramEncoder::UnigramEncoder(const Vocabulary& vocabulary)
    : vocabulary_(vocabulary), charsmap_(read_charsmap(vocabulary)) {
  float lowest = FLT_MAX;
  for (const TokenInfo& token : vocabulary.tokens) {
    if (token.kind == TokenKind::normal) lowest = std::min(lowest, token.score);
    if (token.kind == TokenKind::user_defined) {
      for (size_t length = 1; length <= token.text.size(); ++length)
        user_defined_prefixes_.insert(token.text.substr(0, length));
    }
  }
  unknown_score_ = lowest - kUnknownPenalty;
}

TokenId UnigramEncoder::segment_token(std::string_view text) const {
  auto id = vocabulary_.find(text);
  if (!id) return kNoToken;
  TokenKind kind = vocabulary_.tokens[static_cast<size_t>(*id)].kind;
  bool usable =
      kind == TokenKind::normal || kind == TokenKind::user_defined || kind == TokenKind::unused;
  return usable ? *id : kNoToken;
}

PrecompiledCharsmap::Match UnigramEncoder::normalize_prefix(std::string_view text) const {
  if (!user_defined_prefixes_.empty()) {
    size_t longest = 0;
    std::string prefix;
    for (size_t length = 1; length <= text.size(); ++length) {
      prefix.assign(text.substr(0, length));
      if (!user_defined_prefixes_.count(prefix)) break;
      longest = length;
    }
    if (longest > 0) return {text.substr(0, longest), longest};
  }
  PrecompiledCharsmap::Match match = charsmap_.longest_match(text);
  if (match.consumed > 0) return match;
  if (size_t length = unicode::accepted_sequence_length(text, 0)) {
    return {text.substr(0, length), length};
  }
  return {kReplacementCharacter, 1};
}

std::string UnigramEncoder::normalize(std::string_view text) const {
  const std::string space = vocabulary_.escape_whitespaces ? kEscapedSpace : " ";
  const bool suffix = vocabulary_.treat_whitespace_as_suffix;
  const bool prepend_space = vocabulary_.add_space_prefix && !suffix;
  const bool append_space = vocabulary_.add_space_prefix && suffix;
  const bool merge_spaces = vocabulary_.remove_extra_whitespaces;
  std::string normalized;
  normalized.reserve(text.size() * 3);
  bool space_prepended = false;
  bool inside_word = false;
  for (size_t offset = 0; offset < text.size();) {
    PrecompiledCharsmap::Match match = normalize_prefix(text.substr(offset));
    for (char c : match.replacement) {
      if (c == ' ') {
        inside_word = false;
        if (!merge_spaces) normalized += space;
        continue;
      }
      if (!inside_word) {
        inside_word = true;
        if ((prepend_space && !space_prepended) || merge_spaces) {
          normalized += space;
          space_prepended = true;
        }
      }
      normalized += c;
    }
    offset += match.consumed;
  }
  if (append_space) normalized += space;
  return normalized;
}

void UnigramEncoder::encode(std::string_view text, std::vector<TokenId>& out) const {
  const std::string normalized = normalize(text);
  const size_t length = normalized.size();
  if (length == 0) return;
  struct Best {
    TokenId token;
    size_t start;
    float score;
  };
  const TokenId unknown = vocabulary_.unknown;
  std::vector<Best> best(length + 1, {unknown, 0, -FLT_MAX});
  best[0] = {unknown, 0, 0};
  const size_t longest_token = vocabulary_.max_token_bytes;
  for (size_t start = 0; start < length;) {
    size_t character = std::min(
        unicode::lead_byte_length(static_cast<unsigned char>(normalized[start])), length - start);
    const Best from = best[start];
    bool character_covered = false;
    for (size_t end = start + 1; end <= length && end - start <= longest_token; ++end) {
      TokenId id = segment_token(std::string_view(normalized).substr(start, end - start));
      if (id == kNoToken) continue;
      if (end - start == character) character_covered = true;
      const TokenInfo& token = vocabulary_.tokens[static_cast<size_t>(id)];
      // Summed in double and kept in float, as llama.cpp does; user-defined tokens score 0.
      double score = token.kind == TokenKind::user_defined ? 0.0 : static_cast<double>(token.score);
      double challenger = static_cast<double>(from.score) + score;
      if (challenger > best[end].score) best[end] = {id, start, static_cast<float>(challenger)};
    }
    if (!character_covered) {
      double challenger = static_cast<double>(from.score) + unknown_score_;
      size_t end = start + character;
      if (challenger > best[end].score)
        best[end] = {unknown, start, static_cast<float>(challenger)};
    }
    start += character;
  }
  size_t first = out.size();
  bool previous_unknown = false;
  for (size_t end = length;;) {
    const Best& step = best[end];
    bool is_unknown = step.token == unknown;
    if (!(previous_unknown && is_unknown)) out.push_back(step.token);
    if (step.start == 0) break;
    previous_unknown = is_unknown;
    end = step.start;
  }
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

}  // namespace chatflow::engine
