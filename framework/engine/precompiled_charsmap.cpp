#include "framework/engine/precompiled_charsmap.h"

#include <cstring>
#include <stdexcept>

namespace chatflow::engine {

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob) {
  if (blob.size() < 4) {
    throw std::invalid_argument("precompiled charsmap of " + std::to_string(blob.size()) +
                                " bytes has no trie size");
  }
  uint32_t trie_bytes = 0;
  std::memcpy(&trie_bytes, blob.data(), 4);
  if (static_cast<uint64_t>(trie_bytes) + 4 >= blob.size()) {
    throw std::invalid_argument("precompiled charsmap's trie size " + std::to_string(trie_bytes) +
                                " does not fit its " + std::to_string(blob.size()) + " bytes");
  }
  units_.resize(trie_bytes / 4);
  std::memcpy(units_.data(), blob.data() + 4, trie_bytes);
  replacements_.assign(blob.substr(4 + trie_bytes));
}

uint32_t PrecompiledCharsmap::unit(size_t index) const {
  if (index >= units_.size()) {
    throw std::invalid_argument("precompiled charsmap points at unit " + std::to_string(index) +
                                " of " + std::to_string(units_.size()));
  }
  return units_[index];
}

PrecompiledCharsmap::Match PrecompiledCharsmap::longest_match(std::string_view text) const {
  Match match;
  if (units_.empty()) return match;
  auto base = [](uint32_t packed) { return (packed >> 10) << ((packed & (1U << 9)) >> 6); };
  auto label = [](uint32_t packed) { return packed & ((1U << 31) | 0xFF); };
  size_t node = base(unit(0));
  size_t replacement_offset = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte == 0) break;
    node ^= byte;
    uint32_t packed = unit(node);
    if (label(packed) != byte) break;
    bool leaf = (packed >> 8) & 1;
    node ^= base(packed);
    if (leaf) {
      match.consumed = i + 1;
      replacement_offset = unit(node) & ((1U << 31) - 1);
    }
  }
  if (match.consumed > 0) {
    if (replacement_offset >= replacements_.size()) {
      throw std::invalid_argument("precompiled charsmap replacement offset " +
                                  std::to_string(replacement_offset) + " is past its " +
                                  std::to_string(replacements_.size()) + " bytes");
    }
    match.replacement = std::string_view(replacements_.c_str() + replacement_offset);
  }
  return match;
}

}  // namespace chatflow::engine
