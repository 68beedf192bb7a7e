// Reuse of KV blocks across sequences that share a prompt prefix. A full block is identified by
// a hash chain: the hash of its tokens and of the block before it, rooted in a salt. The server
// sets the salt from the authenticated tenant, so tenants never share blocks.
//
// The cache holds one reference on every block it knows; a block no sequence uses any more
// stays cached until the pool needs room, then the least recently used goes first.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "framework/engine/kv_block_allocator.h"
#include "framework/engine/vocabulary.h"

namespace chatflow::engine {

class PrefixCache {
 public:
  explicit PrefixCache(KvBlockAllocator& cache) : cache_(cache) {}
  ~PrefixCache();

  static uint64_t root_hash(std::string_view salt);
  static uint64_t block_hash(uint64_t parent, std::span<const TokenId> tokens);

  // The cached blocks for the longest run of full blocks at the start of `tokens` (at most
  // `max_blocks`), each retained for the caller.
  std::vector<BlockId> match(std::string_view salt, std::span<const TokenId> tokens,
                             int64_t max_blocks);

  // Publishes a block a sequence has just filled (`parent`: the hash of the block before it, or
  // the root). If the same content is already cached, nothing changes (the sequence keeps its own
  // copy).
  void insert(uint64_t hash, uint64_t parent, std::span<const TokenId> tokens, BlockId block);

  // Frees cached blocks no sequence uses, oldest first, until `needed` blocks are free.
  bool make_room(int64_t needed);
  int64_t evictable_blocks() const;
  int64_t cached_blocks() const { return static_cast<int64_t>(entries_.size()); }
  // Forgets every cached block: those no sequence uses are freed, those in use stay with their
  // sequences until they finish. Returns how many were forgotten.
  int64_t clear();

  // Every cached block, most recently used first (saving the cache: prefix_cache_file.h).
  void for_each(
      const std::function<void(uint64_t hash, uint64_t parent, std::span<const TokenId> tokens,
                               BlockId block)>& visit) const;

  int64_t queried_blocks() const { return queried_blocks_; }
  int64_t hit_blocks() const { return hit_blocks_; }

 private:
  struct Entry {
    BlockId block;
    uint64_t parent;              // a chain is only of use from its first block
    std::vector<TokenId> tokens;  // checked on lookup, so a hash collision can never mix contents
    std::list<uint64_t>::iterator recency;
  };

  KvBlockAllocator& cache_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> recency_;  // least recently used first
  int64_t queried_blocks_ = 0;
  int64_t hit_blocks_ = 0;
};

}  // namespace chatflow::engine
