// WordPiece (BERT): normalise (first NFD codepoint, lower case, controls dropped), split on
// whitespace, punctuation and CJK characters, then take the longest vocabulary match from the
// left; a word with an unmatchable rest becomes [UNK]. Word-initial pieces carry U+2581 in GGUF
// vocabularies, where BERT's own vocab.txt marks the others with "##".
#include "framework/engine/tokenizer.h"
#include "framework/engine/unicode.h"
#include "framework/text/bert_words.h"
#include "framework/text/utf8.h"

namespace chatflow::engine {
namespace {

// BERT's normalisation character by character (first NFD code point, lower case, controls
// dropped), then its word split.
std::vector<std::string> split_words(std::string_view text) {
  std::u32string normalized;
  for (uint32_t codepoint : unicode::decode_as_llama(text)) {
    uint32_t c = unicode::nfd_first(codepoint);
    if (unicode::is_whitespace(c)) {
      normalized += U' ';
      continue;
    }
    if (c == 0 || c == 0xFFFD || c == unicode::kInvalid ||
        unicode::category(c) == unicode::Category::control)
      continue;
    normalized += static_cast<char32_t>(unicode::to_lower(c));
  }
  text::BertSplit split;
  split.is_space = [](char32_t c) { return c == U' '; };
  std::vector<std::string> words;
  for (const auto& word : text::split_bert_words(normalized, split))
    words.push_back(text::to_utf8(word));
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
