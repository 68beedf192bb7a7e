#include "framework/engine/unicode.h"

#include <array>
#include <optional>
#include <unordered_map>

#include <utf8proc.h>

namespace chatflow::engine::unicode {

namespace {

// Unicode 15.1's additions, which utf8proc 2.8 (Unicode 15.0) does not know and llama.cpp's
// tables do: CJK Unified Ideographs Extension I, and the new ideographic description characters.
std::optional<Category> unicode_15_1_category(uint32_t codepoint) {
  if (codepoint >= 0x2EBF0 && codepoint <= 0x2EE5D) return Category::letter;
  if ((codepoint >= 0x2FFC && codepoint <= 0x2FFF) || codepoint == 0x31EF) return Category::symbol;
  return std::nullopt;
}

}  // namespace

Category category(uint32_t codepoint) {
  if (codepoint == kInvalid || codepoint > 0x10FFFF) return Category::other;
  auto general = utf8proc_category(static_cast<utf8proc_int32_t>(codepoint));
  if (general == UTF8PROC_CATEGORY_CN) {
    if (auto added = unicode_15_1_category(codepoint)) return *added;
  }
  switch (general) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return Category::letter;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return Category::mark;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return Category::number;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return Category::punctuation;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
      return Category::symbol;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return Category::separator;
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
      return Category::control;
    default:
      return Category::other;
  }
}

bool is_whitespace(uint32_t codepoint) {
  return (codepoint >= 0x09 && codepoint <= 0x0D) || codepoint == 0x20 || codepoint == 0x85 ||
         codepoint == 0xA0 || codepoint == 0x1680 || (codepoint >= 0x2000 && codepoint <= 0x200A) ||
         codepoint == 0x2028 || codepoint == 0x2029 || codepoint == 0x202F || codepoint == 0x205F ||
         codepoint == 0x3000;
}

uint32_t to_lower(uint32_t codepoint) {
  if (codepoint == kInvalid || codepoint > 0x10FFFF) return codepoint;
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(codepoint)));
}

uint32_t nfd_first(uint32_t codepoint) {
  if (codepoint < 0xC0 || codepoint == kInvalid || codepoint > 0x10FFFF) return codepoint;
  utf8proc_int32_t decomposed[8];
  int last_boundclass = 0;
  utf8proc_ssize_t count =
      utf8proc_decompose_char(static_cast<utf8proc_int32_t>(codepoint), decomposed, 8,
                              UTF8PROC_DECOMPOSE, &last_boundclass);
  return count >= 1 ? static_cast<uint32_t>(decomposed[0]) : codepoint;
}

size_t lead_byte_length(unsigned char lead) {
  static constexpr size_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

size_t accepted_sequence_length(std::string_view text, size_t offset) {
  auto lead = static_cast<unsigned char>(text[offset]);
  size_t length = lead < 0x80             ? 1
                  : (lead & 0xE0) == 0xC0 ? 2
                  : (lead & 0xF0) == 0xE0 ? 3
                  : (lead & 0xF8) == 0xF0 ? 4
                                          : 0;
  if (offset + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((static_cast<unsigned char>(text[offset + i]) & 0xC0) != 0x80) return 0;
  }
  return length;
}

std::vector<uint32_t> decode_as_llama(std::string_view text) {
  static constexpr unsigned char kLeadMasks[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  std::vector<uint32_t> codepoints;
  codepoints.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    size_t length = accepted_sequence_length(text, offset);
    if (length == 0) {
      codepoints.push_back(0xFFFD);
      offset += 1;
      continue;
    }
    uint32_t value = static_cast<unsigned char>(text[offset]) & kLeadMasks[length];
    for (size_t i = 1; i < length; ++i)
      value = (value << 6) | (static_cast<unsigned char>(text[offset + i]) & 0x3F);
    codepoints.push_back(value > 0x10FFFF ? 0xFFFD : value);
    offset += length;
  }
  return codepoints;
}

namespace {

// GPT-2 maps the printable Latin-1 bytes to themselves and the rest to U+0100 upwards.
struct ByteTable {
  std::array<std::string, 256> text;
  std::unordered_map<std::string, uint8_t> bytes;

  ByteTable() {
    auto printable = [](int byte) {
      return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) ||
             (byte >= 0xAE && byte <= 0xFF);
    };
    int next = 0;
    for (int byte = 0; byte < 256; ++byte) {
      uint32_t codepoint =
          printable(byte) ? static_cast<uint32_t>(byte) : 256 + static_cast<uint32_t>(next++);
      append_utf8(text[byte], codepoint);
      bytes.emplace(text[byte], static_cast<uint8_t>(byte));
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

}  // namespace

const std::string& byte_to_text(uint8_t byte) {
  return byte_table().text[byte];
}

int text_to_byte(std::string_view character) {
  auto found = byte_table().bytes.find(std::string(character));
  return found == byte_table().bytes.end() ? -1 : found->second;
}

}  // namespace chatflow::engine::unicode
