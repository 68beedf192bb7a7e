// The Unicode facts tokenizers need: UTF-8 decoding that never throws, general categories,
// whitespace, lowercase and first-codepoint NFD (from utf8proc), and GPT-2's byte-to-character map.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::engine::unicode {

// A decoded codepoint and the bytes it came from. Invalid UTF-8 decodes one byte at a time to
// kInvalid, so every input byte is accounted for and can still be byte-encoded.
struct Codepoint {
  uint32_t value;
  uint32_t offset;  // byte offset in the text
  uint32_t length;  // bytes (1 to 4)
};

inline constexpr uint32_t kInvalid = 0xFFFFFFFF;

std::vector<Codepoint> decode(std::string_view text);
// Length of the UTF-8 sequence a lead byte announces (1 for continuation or invalid bytes).
size_t sequence_length(unsigned char lead);
// Bytes of the longest prefix of `text` that ends on a complete UTF-8 character.
size_t complete_prefix_length(std::string_view text);
void append_utf8(std::string& out, uint32_t codepoint);

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
