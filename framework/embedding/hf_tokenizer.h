// A Hugging Face `tokenizer.json`, enough of it for static embedding models: the normalizers
// (BertNormalizer, Lowercase, NFC/NFD/NFKC/NFKD, StripAccents, Replace, Strip, Sequence), the
// pre-tokenizers (BertPreTokenizer, Whitespace, WhitespaceSplit, Metaspace, Sequence) and the
// WordPiece and Unigram models. Special tokens are not added; added tokens written in the text
// are recognised, as the reference library does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::embedding {

class HfTokenizer {
 public:
  // Throws std::runtime_error naming the file and the unsupported or malformed part.
  static std::unique_ptr<HfTokenizer> load(const std::string& path);
  virtual ~HfTokenizer() = default;

  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual int32_t unk_id() const = 0;  // -1 when the model has none
  virtual size_t vocabulary_size() const = 0;
  // The median byte length of the vocabulary's tokens (model2vec truncates text by it).
  virtual size_t median_token_length() const = 0;
};

}  // namespace chatflow::embedding
