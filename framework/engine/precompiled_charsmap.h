// SentencePiece's precompiled normaliser, as T5-style (Unigram) GGUF files carry it in
// tokenizer.ggml.precompiled_charsmap: a little-endian uint32 byte count, that many bytes of a
// XOR-compressed compact double array (Kanda 2018) over UTF-8 byte strings, then the
// NUL-terminated replacement strings its leaves point into. Normalising replaces the longest
// prefix the array knows by its replacement (NFKC folds, for instance).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::engine {

class PrecompiledCharsmap {
 public:
  struct Match {
    std::string_view replacement;
    size_t consumed = 0;  // input bytes replaced; 0 when no prefix is in the map
  };

  PrecompiledCharsmap() = default;
  // Throws std::invalid_argument naming what is malformed.
  explicit PrecompiledCharsmap(std::string_view blob);

  bool empty() const { return units_.empty(); }
  // The longest prefix of `text` (stopping at a NUL byte) that the map replaces.
  Match longest_match(std::string_view text) const;

 private:
  uint32_t unit(size_t index) const;

  std::vector<uint32_t> units_;  // each: BASE in bits 10..30 (shifted by 8 when bit 9 is set),
                                 // LEAF in bit 8, LCHECK in bits 0..7 and 31
  std::string replacements_;
};

}  // namespace chatflow::engine
