// Byte-level BPE (GPT-2 family): pre-tokenize into words, map every byte to a printable
// character, then apply the ranked merges inside each word, lowest rank first.
#include <queue>

#include "framework/engine/pre_tokenizer.h"
#include "framework/engine/tokenizer.h"
#include "framework/engine/unicode.h"

namespace chatflow::engine {
namespace {

struct Symbol {
  size_t offset;
  size_t length;
  int previous;
  int next;
};

struct Candidate {
  int left;
  int right;
  int rank;
  size_t left_length;
  size_t right_length;
};

struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::encode_byte_pair(std::string_view text, std::vector<TokenId>& out) const {
  const Vocabulary& vocabulary = *vocabulary_;
  for (const std::string& raw_word : pre_tokenizer_->split(text)) {
    std::string word;
    word.reserve(raw_word.size() * 2);
    for (char byte : raw_word)
      word += unicode::byte_to_text(static_cast<uint8_t>(byte));
    if (vocabulary.ignore_merges) {
      if (auto id = vocabulary.find(word)) {
        out.push_back(*id);
        continue;
      }
    }
    std::vector<Symbol> symbols;
    for (size_t offset = 0; offset < word.size();) {
      size_t length = std::min(unicode::sequence_length(static_cast<unsigned char>(word[offset])),
                               word.size() - offset);
      int index = static_cast<int>(symbols.size());
      symbols.push_back(
          {offset, length, index - 1, offset + length == word.size() ? -1 : index + 1});
      offset += length;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
    auto consider = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      int rank = vocabulary.merge_rank(
          std::string_view(word).substr(symbols[left].offset, symbols[left].length),
          std::string_view(word).substr(symbols[right].offset, symbols[right].length));
      if (rank >= 0) queue.push({left, right, rank, symbols[left].length, symbols[right].length});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i)
      consider(i - 1, i);
    while (!queue.empty()) {
      Candidate candidate = queue.top();
      queue.pop();
      Symbol& left = symbols[candidate.left];
      Symbol& right = symbols[candidate.right];
      // Stale unless both sides are still exactly the symbols the pair was proposed for.
      if (left.length != candidate.left_length || right.length != candidate.right_length ||
          left.next != candidate.right) {
        continue;
      }
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].previous = candidate.left;
      consider(left.previous, candidate.left);
      consider(candidate.left, left.next);
    }
    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
      std::string_view piece = std::string_view(word).substr(symbols[i].offset, symbols[i].length);
      if (auto id = vocabulary.find(piece)) {
        out.push_back(*id);
        continue;
      }
      // Not in the vocabulary: llama.cpp looks up each byte of the byte-level text on its own
      // and drops those that are no token.
      for (char byte : piece) {
        if (auto id = vocabulary.find(std::string_view(&byte, 1))) out.push_back(*id);
      }
    }
  }
}

}  // namespace chatflow::engine
