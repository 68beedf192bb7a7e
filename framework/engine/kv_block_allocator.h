// The host side of the paged KV cache: which of a pool's blocks are free, who holds each one,
// and each sequence's block table. The memory the blocks name belongs to the backend
// (backend.h), which computes with it; nothing here touches it. Blocks are reference-counted so
// sequences (and the prefix cache) can share the blocks of a common prompt prefix. Used by one
// engine thread at a time (not thread-safe).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace chatflow::engine {

using BlockId = int32_t;

class KvBlockAllocator {
 public:
  // `block_tokens` must be a positive multiple of 16, `blocks` at least 1.
  KvBlockAllocator(int64_t block_tokens, int64_t blocks);

  int64_t block_tokens() const { return block_tokens_; }
  int64_t total_blocks() const { return static_cast<int64_t>(references_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_list_.size()); }

  // A fresh block with reference count 1, or nullopt when the pool is exhausted.
  std::optional<BlockId> allocate();
  void retain(BlockId block);
  // Returns the block to the free list when its last reference goes.
  void release(BlockId block);
  int32_t references(BlockId block) const { return references_[static_cast<size_t>(block)]; }

 private:
  int64_t block_tokens_;
  std::vector<BlockId> free_list_;
  std::vector<int32_t> references_;
};

// One sequence's view of the cache: its block table (block i holds positions
// [i * block_tokens, (i + 1) * block_tokens)) and how many positions hold keys and values.
struct KvSequence {
  std::vector<BlockId> blocks;
  int64_t length = 0;  // positions filled
};

// Makes room for `length` positions, allocating blocks as needed. All or nothing: on false the
// sequence is unchanged.
bool reserve(KvBlockAllocator& allocator, KvSequence& sequence, int64_t length);
// Releases every block of the sequence and empties it.
void release(KvBlockAllocator& allocator, KvSequence& sequence);

}  // namespace chatflow::engine
