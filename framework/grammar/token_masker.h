// Which tokens of a vocabulary a grammar allows next. The token bytes are indexed as a trie (in
// preorder, so a walk is one pass over arrays), and a mask is computed by walking the trie from a
// matcher state, every token sharing the work of its prefixes. Masks are cached per state.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/grammar/matcher.h"

namespace chatflow::grammar {

struct TokenTable {
  // Token id = index; the bytes it decodes to; "" is never allowed (control tokens).
  std::vector<std::string> token_bytes;
  // The trie without its root, in preorder: node i holds byte trie_byte[i], its subtree is
  // [i, trie_end[i]), and the tokens ending there are
  // trie_tokens[trie_token_begin[i] .. trie_token_begin[i + 1]).
  std::vector<uint8_t> trie_byte;
  std::vector<uint32_t> trie_end;
  std::vector<uint32_t> trie_token_begin;
  std::vector<int32_t> trie_tokens;
  // The most code points one token can touch (a partial one at either end counting whole).
  size_t max_token_code_points = 0;
};

std::shared_ptr<const TokenTable> make_token_table(std::vector<std::string> token_bytes);

// One per (grammar, token table), shared by many sequences; thread-safe.
class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTable> tokens,
              size_t cache_capacity = 4096);

  // Bit i (word i / 64, bit i % 64) set: token i can come next from `state` (advance would
  // succeed). Cached per state, least recently used dropped first. A mask not cached is computed
  // within `budget` and the grammar's limits (GrammarLimitExceeded, GrammarWorkCancelled).
  std::shared_ptr<const std::vector<uint64_t>> allowed(const Matcher& state,
                                                       const WorkBudget& budget = {});
  // The cached mask of `state`, or null: a lookup that never computes.
  std::shared_ptr<const std::vector<uint64_t>> cached(const Matcher& state);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
  };
  Stats stats() const;

  const TokenTable& tokens() const { return *tokens_; }

 private:
  using Mask = std::shared_ptr<const std::vector<uint64_t>>;
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& key) const;
  };
  std::vector<uint32_t> key_of(const Matcher& state) const;
  Mask compute(const std::vector<uint32_t>& key, const WorkBudget& budget) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTable> tokens_;
  std::vector<uint32_t> clamp_;
  size_t capacity_;

  mutable std::mutex mutex_;
  std::list<std::pair<std::vector<uint32_t>, Mask>> recent_;  // most recent first
  std::unordered_map<std::vector<uint32_t>, decltype(recent_)::iterator, KeyHash> cache_;
  Stats stats_;
};

// Sets every logit whose token `mask` forbids to -infinity.
void apply_mask(const std::vector<uint64_t>& mask, float* logits, size_t count);

}  // namespace chatflow::grammar
