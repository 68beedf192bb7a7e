// WordPiece (BERT): normalise (first NFD codepoint, lower case, controls dropped), split on
// whitespace, punctuation and CJK characters, then take the longest vocabulary match from the
// left; a word with an unmatchable rest becomes [UNK]. Word-initial pieces carry U+2581 in GGUF
// vocabularies, where BERT's own vocab.txt marks the others with "##".
#include "framework/engine/tokenizer.h"
#include "framework/engine/unicode.h"

namespace chatflow::engine {
namespace {

bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words(1);
  for (const auto& character : unicode::decode(text)) {
    uint32_t c = unicode::nfd_first(character.value);
    if (unicode::is_whitespace(c)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    unicode::Category category = unicode::category(c);
    if (c == 0 || c == 0xFFFD || c == unicode::kInvalid || category == unicode::Category::control)
      continue;
    std::string lowered;
    unicode::append_utf8(lowered, unicode::to_lower(c));
    if (category == unicode::Category::punctuation ||
        (c < 0x7F && category == unicode::Category::symbol) || is_cjk(c)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = lowered;
      words.emplace_back();
    } else {
      words.back() += lowered;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void Tokenizer::encode_wordpiece(std::string_view text, std::vector<TokenId>& out) const {
  const Vocabulary& vocabulary = *vocabulary_;
  for (const std::string& word : split_words(text)) {
    std::string marked = "\xE2\x96\x81" + word;
    size_t before = out.size();
    bool matched_all = true;
    for (size_t start = 0; start < marked.size();) {
      size_t longest = std::min(marked.size(), start + vocabulary.max_token_bytes);
      bool matched = false;
      for (size_t end = longest; end > start; --end) {
        if (auto id = vocabulary.find(std::string_view(marked).substr(start, end - start))) {
          out.push_back(*id);
          start = end;
          matched = true;
          break;
        }
      }
      if (!matched) {
        matched_all = false;
        break;
      }
    }
    if (!matched_all) {
      out.resize(before);
      out.push_back(vocabulary.unknown);
    }
  }
}

}  // namespace chatflow::engine
