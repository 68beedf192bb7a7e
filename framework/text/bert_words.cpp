#include "framework/text/bert_words.h"

#include <utf8proc.h>

namespace chatflow::text {

bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_bert_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  if (c > 0x10FFFF) return false;
  auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category >= UTF8PROC_CATEGORY_PC && category <= UTF8PROC_CATEGORY_PO;
}

std::vector<std::u32string> split_bert_words(std::u32string_view text, const BertSplit& split) {
  std::vector<std::u32string> words;
  std::u32string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (char32_t c : text) {
    if (split.is_space && split.is_space(c)) {
      flush();
    } else if ((split.punctuation && is_bert_punctuation(c)) ||
               (split.cjk && is_cjk_ideograph(c))) {
      flush();
      words.emplace_back(1, c);
    } else {
      word += c;
    }
  }
  flush();
  return words;
}

}  // namespace chatflow::text
