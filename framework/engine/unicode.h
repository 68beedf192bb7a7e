// The Unicode facts tokenizers need: general categories,
// whitespace, lowercase and first-codepoint NFD (from utf8proc), and GPT-2's byte-to-character map.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "framework/text/utf8.h"

namespace chatflow::engine::unicode {

// UTF-8 itself lives in framework/text/utf8.h; the tokenizers use it under these names.
using text::Codepoint;
using text::complete_prefix_length;
using text::decode;
using text::kInvalid;
using text::sequence_length;
inline void append_utf8(std::string& out, uint32_t codepoint) {
  text::append(out, codepoint);
}

enum class Category : uint8_t {
  other,
  letter,
  mark,
  number,
  punctuation,
  symbol,
  separator,
  control
};

Category category(uint32_t codepoint);
// Unicode White_Space, as llama.cpp's tokenizers define it.
bool is_whitespace(uint32_t codepoint);
uint32_t to_lower(uint32_t codepoint);
// The first codepoint of the canonical decomposition (accents dropped), as BERT's
// normaliser and llama.cpp's WordPiece pre-processing use it.
uint32_t nfd_first(uint32_t codepoint);

// GPT-2's byte-level encoding: every byte maps to one printable character.
const std::string& byte_to_text(uint8_t byte);
// The byte a byte-level character stands for, or -1 when `character` is not one.
int text_to_byte(std::string_view character);

}  // namespace chatflow::engine::unicode
