#include "framework/engine/prefix_cache.h"

namespace chatflow::engine {
namespace {

uint64_t mix(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

}  // namespace

PrefixCache::~PrefixCache() {
  clear();
}

uint64_t PrefixCache::root_hash(std::string_view salt) {
  uint64_t hash = mix(0x5A17ull);
  for (char c : salt)
    hash = mix(hash ^ static_cast<uint8_t>(c));
  return mix(hash ^ salt.size());
}

uint64_t PrefixCache::block_hash(uint64_t parent, std::span<const TokenId> tokens) {
  uint64_t hash = mix(parent);
  for (TokenId token : tokens)
    hash = mix(hash ^ static_cast<uint32_t>(token));
  return hash;
}

std::vector<BlockId> PrefixCache::match(std::string_view salt, std::span<const TokenId> tokens,
                                        int64_t max_blocks) {
  const int64_t block_tokens = cache_.block_tokens();
  std::vector<BlockId> blocks;
  uint64_t hash = root_hash(salt);
  for (int64_t b = 0;
       b < max_blocks && (b + 1) * block_tokens <= static_cast<int64_t>(tokens.size()); ++b) {
    auto block =
        tokens.subspan(static_cast<size_t>(b * block_tokens), static_cast<size_t>(block_tokens));
    hash = block_hash(hash, block);
    ++queried_blocks_;
    auto found = entries_.find(hash);
    if (found == entries_.end() ||
        !std::equal(block.begin(), block.end(), found->second.tokens.begin()))
      break;
    ++hit_blocks_;
    cache_.retain(found->second.block);
    recency_.splice(recency_.end(), recency_, found->second.recency);
    blocks.push_back(found->second.block);
  }
  return blocks;
}

void PrefixCache::insert(uint64_t hash, uint64_t parent, std::span<const TokenId> tokens,
                         BlockId block) {
  if (entries_.count(hash)) return;
  cache_.retain(block);
  recency_.push_back(hash);
  entries_.emplace(hash, Entry{block, parent, std::vector<TokenId>(tokens.begin(), tokens.end()),
                               std::prev(recency_.end())});
}

bool PrefixCache::make_room(int64_t needed) {
  for (auto it = recency_.begin(); cache_.free_blocks() < needed && it != recency_.end();) {
    auto entry = entries_.find(*it);
    if (cache_.references(entry->second.block) == 1) {  // only the cache holds it
      cache_.release(entry->second.block);
      entries_.erase(entry);
      it = recency_.erase(it);
    } else {
      ++it;
    }
  }
  return cache_.free_blocks() >= needed;
}

int64_t PrefixCache::clear() {
  const int64_t forgotten = cached_blocks();
  for (const auto& [hash, entry] : entries_)
    cache_.release(entry.block);
  entries_.clear();
  recency_.clear();
  return forgotten;
}

int64_t PrefixCache::evictable_blocks() const {
  int64_t count = 0;
  for (const auto& [hash, entry] : entries_)
    count += cache_.references(entry.block) == 1;
  return count;
}

}  // namespace chatflow::engine

namespace chatflow::engine {

void PrefixCache::for_each(
    const std::function<void(uint64_t, uint64_t, std::span<const TokenId>, BlockId)>& visit) const {
  for (auto it = recency_.rbegin(); it != recency_.rend(); ++it) {
    const Entry& entry = entries_.at(*it);
    visit(*it, entry.parent, entry.tokens, entry.block);
  }
}

}  // namespace chatflow::engine
