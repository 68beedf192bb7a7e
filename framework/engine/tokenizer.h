// Text to token ids and back, for the four tokenizer families GGUF models use: SentencePiece
// (llama: scored merges with byte fallback), byte-level BPE (gpt2 family, with the
// pre-tokenizer named by tokenizer.ggml.pre), WordPiece (bert) and Unigram (t5). Results match
// llama.cpp b4748's llama-tokenize. Encoding is thread-safe.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

class PreTokenizer;
class UnigramEncoder;

class Tokenizer {
 public:
  // Throws GgufError when the vocabulary's pre-tokenizer is unknown.
  explicit Tokenizer(std::shared_ptr<const Vocabulary> vocabulary);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  const Vocabulary& vocabulary() const { return *vocabulary_; }

  // `add_special`: BOS/EOS (or CLS/SEP) as the vocabulary asks for them.
  // `parse_special`: control tokens written in the text ("<|im_start|>") become those tokens;
  // otherwise only user-defined tokens are recognised, and control-token text is plain text.
  std::vector<TokenId> encode(std::string_view text, bool add_special,
                              bool parse_special = false) const;

  // Like encode, but control tokens are recognised only inside the `trusted` byte ranges of
  // `text` (what a chat template wrote), never in the parts users wrote.
  std::vector<TokenId> encode_trusted(std::string_view text, bool add_special,
                                      std::span<const std::pair<size_t, size_t>> trusted) const;

  // The bytes token `id` stands for. Control and unknown tokens give "" unless `special`.
  // Throws std::out_of_range for an id outside the vocabulary.
  std::string piece(TokenId id, bool special = false) const;

  // The text of a whole sequence: pieces joined, without SentencePiece's added leading space.
  std::string decode(std::span<const TokenId> ids, bool special = false) const;

 private:
  std::vector<TokenId> encode_with(std::string_view text, bool add_special, bool parse_special,
                                   std::span<const std::pair<size_t, size_t>> trusted) const;
  void encode_fragment(std::string_view text, bool first_fragment, std::vector<TokenId>& out) const;
  void encode_sentencepiece(std::string_view text, std::vector<TokenId>& out) const;
  void encode_byte_pair(std::string_view text, std::vector<TokenId>& out) const;
  void encode_wordpiece(std::string_view text, std::vector<TokenId>& out) const;

  std::shared_ptr<const Vocabulary> vocabulary_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<UnigramEncoder> unigram_;
};

}  // namespace chatflow::engine
