// BERT's word split, shared by the GGUF WordPiece tokenizer (engine) and the tokenizer.json
// reader of the embedders: white space ends a word, each punctuation mark and (optionally) each
// CJK ideograph is a word of its own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chatflow::text {

// The CJK Unified Ideograph blocks BERT splits around. The Extension E block starts at U+2B920
// here, as in Hugging Face's Rust tokenizers (the Unicode block starts at U+2B820): both
// tokenizers are compared against references built with that table.
bool is_cjk_ideograph(char32_t c);
// ASCII punctuation and symbols, and every Unicode punctuation category.
bool is_bert_punctuation(char32_t c);

struct BertSplit {
  bool (*is_space)(char32_t) = nullptr;  // what ends a word (and is dropped)
  bool punctuation = true;               // punctuation marks stand alone
  bool cjk = true;                       // CJK ideographs stand alone
};

std::vector<std::u32string> split_bert_words(std::u32string_view text, const BertSplit& split);

}  // namespace chatflow::text
