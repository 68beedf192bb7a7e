#include "framework/text/normalizer.h"

#include <utf8proc.h>

#include "framework/text/utf8.h"

namespace chatflow::text {

std::pair<size_t, size_t> NormalizedText::original_span(size_t from, size_t to,
                                                        std::string_view original) const {
  if (from >= origin.size()) return {original.size(), original.size()};
  size_t begin = origin[from];
  size_t last = origin[std::min(to, origin.size()) - 1];
  size_t end = last + sequence_length(static_cast<unsigned char>(original[last]));
  return {begin, std::min(end, original.size())};
}

NormalizedText normalize(std::string_view text) {
  NormalizedText out;
  out.text.reserve(text.size());
  out.origin.reserve(text.size());
  constexpr auto kOptions =
      static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_DECOMPOSE |
                                     UTF8PROC_CASEFOLD | UTF8PROC_IGNORE | UTF8PROC_STRIPMARK);
  bool last_was_space = true;  // drops leading white space
  for (const Codepoint& character : decode(text)) {
    if (character.value == kInvalid) continue;  // invalid UTF-8: skip the byte
    const size_t position = character.offset;
    const auto codepoint = static_cast<utf8proc_int32_t>(character.value);
    utf8proc_int32_t decomposed[32];
    int last_boundclass = 0;
    auto count = utf8proc_decompose_char(codepoint, decomposed, 32, kOptions, &last_boundclass);
    for (utf8proc_ssize_t i = 0; i < count; ++i) {
      utf8proc_int32_t c = decomposed[i];
      utf8proc_category_t category = utf8proc_category(c);
      bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
                   category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL ||
                   category == UTF8PROC_CATEGORY_ZP;
      if (category == UTF8PROC_CATEGORY_CF || category == UTF8PROC_CATEGORY_CC) {
        if (!space) continue;  // format and control characters carry no letters
      }
      if (space) {
        if (last_was_space) continue;
        out.text += ' ';
        out.origin.push_back(position);
        last_was_space = true;
        continue;
      }
      utf8proc_uint8_t bytes[4];
      auto length = utf8proc_encode_char(c, bytes);
      for (utf8proc_ssize_t b = 0; b < length; ++b) {
        out.text += static_cast<char>(bytes[b]);
        out.origin.push_back(position);
      }
      last_was_space = false;
    }
  }
  if (!out.text.empty() && out.text.back() == ' ') {
    out.text.pop_back();
    out.origin.pop_back();
  }
  return out;
}

}  // namespace chatflow::text
