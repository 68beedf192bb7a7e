// Unigram (T5-style, tokenizer.ggml.model "t5"), as llama.cpp b4748 runs it: normalise (the
// precompiled charsmap, spaces as U+2581, optionally a space before the text and runs of spaces
// merged), then choose the segmentation with the highest sum of token scores (Viterbi over byte
// positions, a code point without a token costing the lowest score minus 10 as [UNK]), and merge
// runs of unknown tokens into one.
#pragma once

#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "framework/engine/precompiled_charsmap.h"
#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

class UnigramEncoder {
 public:
  // Throws GgufError when the vocabulary's charsmap is malformed.
  explicit UnigramEncoder(const Vocabulary& vocabulary);

  void encode(std::string_view text, std::vector<TokenId>& out) const;
  // The text the segmentation runs over.
  std::string normalize(std::string_view text) const;

 private:
  // The normalised form of the character(s) at the start of `text`, and how many bytes it
  // replaces.
  PrecompiledCharsmap::Match normalize_prefix(std::string_view text) const;
  // The token `text` is, where the segmentation may use it (normal, user-defined or unused).
  TokenId segment_token(std::string_view text) const;

  const Vocabulary& vocabulary_;
  PrecompiledCharsmap charsmap_;
  // Every prefix of every user-defined token: llama.cpp keeps the longest prefix of the input
  // that leads into its user-defined trie, whether or not a token ends there.
  std::unordered_set<std::string> user_defined_prefixes_;
  float unknown_score_ = 0;
};

}  // namespace chatflow::engine
