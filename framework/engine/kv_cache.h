// The paged KV cache: one pool of fixed-size blocks shared by all sequences, a block table per
// sequence, and a free list. Blocks are reference-counted so sequences can share the blocks of a
// common prompt prefix. Used by one engine thread at a time (not thread-safe).
//
// Block layout, per layer and key/value head: keys as [head_dim][block_tokens] (so attention
// scores for a run of positions come from one broadcast per dimension) and values as
// [block_tokens][head_dim].
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "framework/engine/kv_block_allocator.h"
#include "framework/engine/model_config.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chatflow::engine {

class KvCache {
 public:
  // `block_tokens` must be a positive multiple of 16. Memory is committed as blocks are used.
  KvCache(const ModelConfig& config, int64_t block_tokens, int64_t blocks,
          kernels::KvType type = kernels::KvType::f16);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t block_tokens() const { return block_tokens_; }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_list_.size()); }
  kernels::KvType type() const { return type_; }
  size_t block_bytes() const { return block_stride_ * element_bytes(); }
  size_t element_bytes() const { return kernels::kv_element_bytes(type_); }

  // A fresh block with reference count 1, or nullopt when the pool is exhausted.
  std::optional<BlockId> allocate();
  void retain(BlockId block);
  // Returns the block to the free list when its last reference goes.
  void release(BlockId block);
  int32_t references(BlockId block) const { return references_[static_cast<size_t>(block)]; }

  // Elements of type(): float or uint16_t (IEEE half).
  void* pool() { return pool_; }
  const void* pool() const { return pool_; }
  size_t block_stride() const { return block_stride_; }  // in elements
  size_t key_offset(int64_t layer, int64_t kv_head) const;
  size_t value_offset(int64_t layer, int64_t kv_head) const;
  // The element index into pool() of the block holding `position` of `sequence`.
  size_t block_start(const KvSequence& sequence, int64_t position) const;
  // Where `position` of `sequence` keeps the keys of `layer` and `kv_head` (head_dim elements,
  // block_tokens() apart) and its values (head_dim elements in a row).
  size_t key_index(const KvSequence& sequence, int64_t position, int64_t layer,
                   int64_t kv_head) const;
  size_t value_index(const KvSequence& sequence, int64_t position, int64_t layer,
                     int64_t kv_head) const;

 private:
  int64_t block_tokens_;
  int64_t total_blocks_;
  int64_t head_dim_;
  int64_t kv_heads_;
  kernels::KvType type_;
  size_t block_stride_;
  void* pool_ = nullptr;
  std::vector<BlockId> free_list_;
  std::vector<int32_t> references_;
};

// Makes room for `length` positions, allocating blocks as needed. All or nothing: on false the
// sequence is unchanged.
bool reserve(KvCache& cache, KvSequence& sequence, int64_t length);
// Releases every block of the sequence and empties it.
void release(KvCache& cache, KvSequence& sequence);

}  // namespace chatflow::engine
