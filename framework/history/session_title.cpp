#include "framework/history/session_title.h"

#include <vector>

#include "framework/text/utf8.h"

namespace chatflow::history {
namespace {

// Unicode's White_Space property.
bool is_whitespace(uint32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

// A one-line title shows a control character as a space too.
bool is_space_or_control(uint32_t c) {
  return is_whitespace(c) || c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0x9F);
}

// The code points of `text` with runs of whitespace made one space, both ends trimmed.
std::vector<uint32_t> collapsed(std::string_view text) {
  std::vector<uint32_t> out;
  bool pending_space = false;
  for (const text::Codepoint& character : text::decode(text)) {
    uint32_t value = character.value == text::kInvalid ? text::kReplacement : character.value;
    if (is_space_or_control(value)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(value);
  }
  return out;
}

}  // namespace

std::string title_from_message(std::string_view message, size_t limit) {
  std::vector<uint32_t> characters = collapsed(message);
  bool cut = characters.size() > limit;
  if (cut) {
    characters.resize(limit > 0 ? limit - 1 : 0);
    while (!characters.empty() && characters.back() == ' ')
      characters.pop_back();
  }
  std::string title;
  for (uint32_t c : characters)
    text::append(title, c);
  if (cut && limit > 0) title += "\u2026";
  return title;
}

}  // namespace chatflow::history
