#include "framework/grammar/token_masker.h"

#include <algorithm>
#include <limits>
#include <map>

#include "framework/grammar/stack_forest.h"

namespace chatflow::grammar {

std::shared_ptr<const TokenTable> make_token_table(std::vector<std::string> token_bytes) {
  auto table = std::make_shared<TokenTable>();
  struct TrieNode {
    std::map<uint8_t, uint32_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<TrieNode> trie(1);
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    const std::string& bytes = token_bytes[id];
    if (bytes.empty()) continue;
    uint32_t node = 0;
    for (char c : bytes) {
      auto byte = static_cast<uint8_t>(c);
      auto it = trie[node].children.find(byte);
      if (it == trie[node].children.end()) {
        trie.emplace_back();
        it = trie[node].children.emplace(byte, static_cast<uint32_t>(trie.size() - 1)).first;
      }
      node = it->second;
    }
    trie[node].tokens.push_back(static_cast<int32_t>(id));
    size_t code_points = (static_cast<uint8_t>(bytes[0]) & 0xC0) == 0x80 ? 1 : 0;
    for (char c : bytes)
      code_points += (static_cast<uint8_t>(c) & 0xC0) != 0x80 ? 1 : 0;
    table->max_token_code_points = std::max(table->max_token_code_points, code_points);
  }
  // Preorder, iteratively: (trie node, byte, index of its preorder slot once written).
  struct Visit {
    uint32_t node;
    uint8_t byte;
    bool leaving;
    uint32_t slot;
  };
  std::vector<Visit> pending;
  for (auto it = trie[0].children.rbegin(); it != trie[0].children.rend(); ++it)
    pending.push_back({it->second, it->first, false, 0});
  while (!pending.empty()) {
    Visit visit = pending.back();
    pending.pop_back();
    if (visit.leaving) {
      table->trie_end[visit.slot] = static_cast<uint32_t>(table->trie_byte.size());
      continue;
    }
    uint32_t slot = static_cast<uint32_t>(table->trie_byte.size());
    table->trie_byte.push_back(visit.byte);
    table->trie_end.push_back(0);
    table->trie_token_begin.push_back(static_cast<uint32_t>(table->trie_tokens.size()));
    const TrieNode& node = trie[visit.node];
    table->trie_tokens.insert(table->trie_tokens.end(), node.tokens.begin(), node.tokens.end());
    pending.push_back({visit.node, visit.byte, true, slot});
    for (auto it = node.children.rbegin(); it != node.children.rend(); ++it)
      pending.push_back({it->second, it->first, false, 0});
  }
  table->trie_token_begin.push_back(static_cast<uint32_t>(table->trie_tokens.size()));
  table->token_bytes = std::move(token_bytes);
  return table;
}

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> grammar,
                         std::shared_ptr<const TokenTable> tokens, size_t cache_capacity)
    : grammar_(std::move(grammar)),
      tokens_(std::move(tokens)),
      clamp_(grammar_->clamped_positions(tokens_->max_token_code_points)),
      capacity_(std::max<size_t>(cache_capacity, 1)) {}

size_t TokenMasker::KeyHash::operator()(const std::vector<uint32_t>& key) const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (uint32_t x : key)
    hash = (hash ^ x) * 0x100000001b3ULL;
  return static_cast<size_t>(hash);
}

// The state with its positions clamped (see Grammar::clamped_positions).
std::vector<uint32_t> TokenMasker::key_of(const Matcher& state) const {
  std::vector<uint32_t> key = state.state();
  size_t at = 1;
  for (uint32_t stack = 0; stack < key[0]; ++stack) {
    uint32_t length = key[at++];
    for (uint32_t i = 0; i < length; ++i, ++at)
      key[at] = clamp_[key[at]];
  }
  return key;
}

std::shared_ptr<const std::vector<uint64_t>> TokenMasker::cached(const Matcher& state) {
  std::vector<uint32_t> key = key_of(state);
  std::lock_guard lock(mutex_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return nullptr;
  recent_.splice(recent_.begin(), recent_, it->second);
  ++stats_.hits;
  return it->second->second;
}

std::shared_ptr<const std::vector<uint64_t>> TokenMasker::allowed(const Matcher& state,
                                                                  const WorkBudget& budget) {
  std::vector<uint32_t> key = key_of(state);
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
  }
  Mask mask = compute(key, budget);
  std::lock_guard lock(mutex_);
  ++stats_.misses;
  if (cache_.count(key) == 0) {
    recent_.emplace_front(key, mask);
    cache_.emplace(std::move(key), recent_.begin());
    if (recent_.size() > capacity_) {
      cache_.erase(recent_.back().first);
      recent_.pop_back();
    }
  }
  return mask;
}

TokenMasker::Stats TokenMasker::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

TokenMasker::Mask TokenMasker::compute(const std::vector<uint32_t>& key,
                                       const WorkBudget& budget) const {
  const TokenTable& table = *tokens_;
  budget.check();
  auto mask = std::make_shared<std::vector<uint64_t>>((table.token_bytes.size() + 63) / 64, 0);
  StackForest forest(*grammar_);
  int32_t root = forest.import(key);
  std::vector<std::pair<uint32_t, int32_t>> path;  // (subtree end, walk state) of the ancestors
  size_t count = table.trie_byte.size();
  size_t visits = 0;
  for (size_t i = 0; i < count;) {
    // A step of an ambiguous grammar may take milliseconds: look at the clock and the cancel
    // flag often enough that either stops the walk promptly.
    if (++visits % 64 == 0) budget.check();
    while (!path.empty() && path.back().first <= i)
      path.pop_back();
    int32_t parent = path.empty() ? root : path.back().second;
    int32_t next = forest.step(parent, table.trie_byte[i]);
    if (next == StackForest::kDead) {
      i = table.trie_end[i];
      continue;
    }
    for (uint32_t t = table.trie_token_begin[i]; t < table.trie_token_begin[i + 1]; ++t) {
      auto token = static_cast<uint32_t>(table.trie_tokens[t]);
      (*mask)[token / 64] |= uint64_t{1} << (token % 64);
    }
    path.emplace_back(table.trie_end[i], next);
    ++i;
  }
  return mask;
}

void apply_mask(const std::vector<uint64_t>& mask, float* logits, size_t count) {
  constexpr float kForbidden = -std::numeric_limits<float>::infinity();
  for (size_t word = 0; word * 64 < count; ++word) {
    uint64_t bits = word < mask.size() ? mask[word] : 0;
    if (bits == ~uint64_t{0}) continue;
    size_t end = std::min(count, word * 64 + 64);
    if (bits == 0) {
      std::fill(logits + word * 64, logits + end, kForbidden);
      continue;
    }
    for (size_t i = word * 64; i < end; ++i)
      if ((bits >> (i - word * 64) & 1) == 0) logits[i] = kForbidden;
  }
}

}  // namespace chatflow::grammar
