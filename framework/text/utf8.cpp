#include "framework/text/utf8.h"

#include <utf8proc.h>

namespace chatflow::text {
namespace {

// Bytes of the well-formed character at the start of `text`, or 0 when there is none.
size_t valid_length(std::string_view text) {
  utf8proc_int32_t value = 0;
  utf8proc_ssize_t length = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                             static_cast<utf8proc_ssize_t>(text.size()), &value);
  return length > 0 ? static_cast<size_t>(length) : 0;
}

}  // namespace

std::vector<Codepoint> decode(std::string_view text) {
  std::vector<Codepoint> code_points;
  code_points.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    utf8proc_int32_t value = 0;
    utf8proc_ssize_t length =
        utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + offset),
                         static_cast<utf8proc_ssize_t>(text.size() - offset), &value);
    if (length <= 0) {
      code_points.push_back({kInvalid, static_cast<uint32_t>(offset), 1});
      offset += 1;
      continue;
    }
    code_points.push_back({static_cast<uint32_t>(value), static_cast<uint32_t>(offset),
                           static_cast<uint32_t>(length)});
    offset += static_cast<size_t>(length);
  }
  return code_points;
}

std::u32string to_code_points(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (const Codepoint& character : decode(text))
    out += character.value == kInvalid ? kReplacement : static_cast<char32_t>(character.value);
  return out;
}

void append(std::string& out, uint32_t code_point) {
  utf8proc_uint8_t buffer[4];
  utf8proc_ssize_t length = utf8proc_encode_char(static_cast<utf8proc_int32_t>(code_point), buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(length));
}

std::string to_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points)
    append(out, c);
  return out;
}

std::optional<size_t> first_invalid_byte(std::string_view text) {
  size_t offset = 0;
  while (offset < text.size()) {
    if (static_cast<unsigned char>(text[offset]) < 0x80) {
      ++offset;
      continue;
    }
    size_t length = valid_length(text.substr(offset));
    if (length == 0) return offset;
    offset += length;
  }
  return std::nullopt;
}

std::string repair(std::string_view text) {
  if (!first_invalid_byte(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (const Codepoint& character : decode(text)) {
    if (character.value == kInvalid) {
      append(out, kReplacement);
    } else {
      out.append(text.substr(character.offset, character.length));
    }
  }
  return out;
}

size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

size_t complete_prefix_length(std::string_view text) {
  // Look back at most three bytes for the start of an unfinished sequence.
  size_t size = text.size();
  for (size_t back = 1; back <= 3 && back <= size; ++back) {
    unsigned char byte = static_cast<unsigned char>(text[size - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t needed = sequence_length(byte);
    return needed > back ? size - back : size;
  }
  return size;
}

}  // namespace chatflow::text
