// SentencePiece (BPE variant with scores): start from single characters and repeatedly merge
// the adjacent pair whose merged text is the highest-scoring token; what stays unknown falls back
// to byte tokens <0x..>.
#include <queue>

#include "framework/engine/tokenizer.h"
#include "framework/engine/unicode.h"

namespace chatflow::engine {
namespace {

struct Symbol {
  size_t offset;
  size_t length;  // 0 once merged into its left neighbour
  int previous;
  int next;
};

struct Candidate {
  int left;
  int right;
  float score;
  size_t length;
};

// Highest score first; on ties the leftmost pair, as SentencePiece does.
struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::encode_sentencepiece(std::string_view text, std::vector<TokenId>& out) const {
  const Vocabulary& vocabulary = *vocabulary_;
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < text.size();) {
    size_t length = std::min(unicode::lead_byte_length(static_cast<unsigned char>(text[offset])),
                             text.size() - offset);
    int index = static_cast<int>(symbols.size());
    symbols.push_back({offset, length, index - 1, offset + length == text.size() ? -1 : index + 1});
    offset += length;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    std::string_view merged =
        text.substr(symbols[left].offset, symbols[left].length + symbols[right].length);
    if (auto id = vocabulary.find(merged)) {
      queue.push({left, right, vocabulary.tokens[static_cast<size_t>(*id)].score, merged.size()});
    }
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i)
    consider(i - 1, i);
  while (!queue.empty()) {
    Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[candidate.left];
    Symbol& right = symbols[candidate.right];
    // Stale: one side was merged elsewhere since this pair was proposed.
    if (left.length == 0 || right.length == 0 || left.length + right.length != candidate.length)
      continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].previous = candidate.left;
    consider(left.previous, candidate.left);
    consider(candidate.left, left.next);
  }
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
    if (auto id = vocabulary.find(piece)) {
      out.push_back(*id);
      continue;
    }
    for (char byte : piece) {
      auto id = vocabulary.byte_token(static_cast<uint8_t>(byte));
      out.push_back(id ? *id : vocabulary.unknown);
    }
  }
}

}  // namespace chatflow::engine
