#include "support/charsmap_builder.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace chatflow::testing {
namespace {

// A plain byte trie first; every node with children or a value then gets a block of 256 units
// of its own (children at block + byte, the value at block + 0), which keeps XOR addressing
// trivial: block ^ byte == block + byte when blocks are multiples of 256.
struct TrieNode {
  std::map<unsigned char, size_t> children;
  int64_t value = -1;  // offset of the replacement string
};

uint32_t pack_node(uint32_t base, bool leaf, unsigned char label) {
  if (base >= (1U << 21)) throw std::length_error("charsmap too large for the test builder");
  return (base << 10) | (leaf ? 1U << 8 : 0U) | label;
}

}  // namespace

std::string build_precompiled_charsmap(const std::map<std::string, std::string>& replacements) {
  std::vector<TrieNode> nodes(1);
  std::string strings;
  for (const auto& [from, to] : replacements) {
    if (from.empty() || from.find('\0') != std::string::npos)
      throw std::invalid_argument("charsmap keys must be non-empty and without NUL");
    size_t node = 0;
    for (char c : from) {
      auto byte = static_cast<unsigned char>(c);
      auto found = nodes[node].children.find(byte);
      if (found == nodes[node].children.end()) {
        nodes.push_back({});
        found = nodes[node].children.emplace(byte, nodes.size() - 1).first;
      }
      node = found->second;
    }
    nodes[node].value = static_cast<int64_t>(strings.size());
    strings += to;
    strings += '\0';
  }
  std::vector<size_t> block(nodes.size(), 0);
  size_t next_block = 256;  // block 0 holds only the root's own unit
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].children.empty() || nodes[i].value >= 0) {
      block[i] = next_block;
      next_block += 256;
    }
  }
  std::vector<uint32_t> units(next_block, 0);
  // A node's index is its parent's block + its byte; it stores base = index ^ its own block.
  std::vector<size_t> index(nodes.size(), 0);
  units[0] = pack_node(static_cast<uint32_t>(block[0]), false, 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& [byte, child] : nodes[i].children) {
      index[child] = block[i] + byte;
      uint32_t base = static_cast<uint32_t>(index[child] ^ block[child]);
      units[index[child]] = pack_node(base, nodes[child].value >= 0, byte);
    }
    if (nodes[i].value >= 0) units[block[i]] = (1U << 31) | static_cast<uint32_t>(nodes[i].value);
  }
  std::string blob(4, '\0');
  uint32_t trie_bytes = static_cast<uint32_t>(units.size() * 4);
  std::memcpy(blob.data(), &trie_bytes, 4);
  blob.append(reinterpret_cast<const char*>(units.data()), units.size() * 4);
  blob += strings;
  return blob;
}

}  // namespace chatflow::testing
