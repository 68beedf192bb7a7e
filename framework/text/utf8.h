// UTF-8 in one place: decoding that never throws, the first byte that breaks RFC 3629, and repair.
// Everything that reads text from outside (HTTP bodies, model output, files) goes through these,
// so every part of chatflow agrees on what is valid: no overlong forms, no surrogates, nothing
// above U+10FFFF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chatflow::text {

// A decoded code point and the bytes it came from. An invalid byte decodes alone to kInvalid,
// so every input byte is accounted for.
struct Codepoint {
  uint32_t value;
  uint32_t offset;  // byte offset in the text
  uint32_t length;  // bytes (1 to 4)
};

inline constexpr uint32_t kInvalid = 0xFFFFFFFF;
inline constexpr char32_t kReplacement = 0xFFFD;

std::vector<Codepoint> decode(std::string_view text);
// The code points of `text`, an invalid byte becoming U+FFFD.
std::u32string to_code_points(std::string_view text);
std::string to_utf8(std::u32string_view code_points);
void append(std::string& out, uint32_t code_point);

// The offset of the first byte that is not part of well-formed UTF-8, or nullopt.
std::optional<size_t> first_invalid_byte(std::string_view text);
// `text` with every invalid byte replaced by U+FFFD.
std::string repair(std::string_view text);

// Length of the sequence a lead byte announces (1 for continuation or invalid bytes).
size_t sequence_length(unsigned char lead);
// Bytes of the longest prefix of `text` that does not end inside a character.
size_t complete_prefix_length(std::string_view text);

}  // namespace chatflow::text
