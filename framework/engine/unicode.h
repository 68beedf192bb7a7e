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

// The character length llama.cpp reads from a lead byte: by its high four bits alone, so a
// continuation byte counts as one and 0xF8..0xFF as four.
size_t lead_byte_length(unsigned char lead);
// The length of the character at `offset` as llama.cpp's decoder accepts it (lead byte and
// continuation bytes only; overlong forms and surrogates pass), or 0 when it rejects the byte.
size_t accepted_sequence_length(std::string_view text, size_t offset);
// Code points as llama.cpp decodes text for its tokenizers: a byte that starts no complete
// sequence becomes U+FFFD on its own; overlong forms are kept as their values (re-encoding
// them gives the shortest form). Values above U+10FFFF, which llama.cpp cannot encode again,
// become U+FFFD too.
std::vector<uint32_t> decode_as_llama(std::string_view text);

// GPT-2's byte-level encoding: every byte maps to one printable character.
const std::string& byte_to_text(uint8_t byte);
// The byte a byte-level character stands for, or -1 when `character` is not one.
int text_to_byte(std::string_view character);

}  // namespace chatflow::engine::unicode
