// A model's vocabulary as stored in GGUF (tokenizer.ggml.*): the tokens with their scores and
// kinds, the special tokens, the BPE merges, and the flags that steer tokenization.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "framework/engine/gguf_file.h"

namespace chatflow::engine {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// GGUF's tokenizer.ggml.token_type values.
enum class TokenKind : uint8_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6
};

struct TokenInfo {
  std::string text;
  float score = 0;
  TokenKind kind = TokenKind::normal;
  // Where the text matches this special token, ASCII whitespace before (after) it is dropped:
  // llama.cpp's LSTRIP (RSTRIP) attributes, which it sets by model name (see vocabulary.cpp).
  bool strips_space_before = false;
  bool strips_space_after = false;
};

enum class TokenizerModel { sentencepiece, byte_pair, wordpiece, unigram };

class Vocabulary {
 public:
  // Reads tokenizer.ggml.*; throws GgufError naming the missing or malformed key.
  static std::shared_ptr<const Vocabulary> from_gguf(const GgufFile& file);

  TokenizerModel model = TokenizerModel::sentencepiece;
  std::string model_name;     // tokenizer.ggml.model as written
  std::string pre_tokenizer;  // tokenizer.ggml.pre ("default" when absent)
  std::vector<TokenInfo> tokens;

  TokenId bos = kNoToken;
  TokenId eos = kNoToken;
  TokenId unknown = kNoToken;
  TokenId separator = kNoToken;
  TokenId padding = kNoToken;
  TokenId end_of_turn = kNoToken;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SentencePiece: a space before the first word
  bool clean_spaces = false;      // BPE/WordPiece detokenization: " ," -> ","
  bool ignore_merges = false;     // BPE: a word that is a whole token is not merged further
  // Unigram (T5): tokenizer.ggml.precompiled_charsmap's bytes (a trie of replacements), and
  // whether runs of spaces collapse to one.
  std::string precompiled_charsmap;
  bool remove_extra_whitespaces = false;
  // SentencePiece's other two normaliser switches. llama.cpp b4748 reads neither from GGUF and
  // always escapes spaces as U+2581 with the space prefix in front, so neither is read here.
  bool escape_whitespaces = true;
  bool treat_whitespace_as_suffix = false;
  std::set<TokenId> end_of_generation;
  // Control, user-defined and unknown tokens, longest text first: matched before tokenizing.
  std::vector<TokenId> special_tokens;
  size_t max_token_bytes = 0;

  size_t size() const { return tokens.size(); }
  std::optional<TokenId> find(std::string_view text) const;
  // The rank of merging `left` and `right` (lower merges first), or -1.
  int merge_rank(std::string_view left, std::string_view right) const;
  // The token for a raw byte: <0xAB> in SentencePiece vocabularies, the byte-level character in
  // BPE.
  std::optional<TokenId> byte_token(uint8_t byte) const;
  bool is_special(TokenId id) const;  // control or unknown: not printed unless asked for
  bool is_end_of_generation(TokenId id) const { return end_of_generation.count(id) > 0; }

 private:
  // tokenizer.ggml.tokens, .scores and .token_type into tokens and ids_.
  void read_tokens(const GgufFile& file);
  // tokenizer.ggml.merges into merge_ranks_ (byte-pair vocabularies only).
  void read_merges(const GgufFile& file);

  std::unordered_map<std::string, TokenId> ids_;
  std::unordered_map<std::string, int> merge_ranks_;  // "left right"
};

}  // namespace chatflow::engine
