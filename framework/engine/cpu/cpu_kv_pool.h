// The CPU backend's KV pool: the memory of the paged KV cache whose block tables the scheduler
// keeps (kv_block_allocator.h). One calloc'ed pool of blocks; zeroed pages are mapped lazily, so
// blocks never used cost no memory.
//
// Block layout, per layer and key/value head: keys as [head_dim][block_tokens] (so attention
// scores for a run of positions come from one broadcast per dimension) and values as
// [block_tokens][head_dim].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "framework/engine/backend.h"
#include "framework/engine/model_config.h"

namespace chatflow::engine {

class CpuKvPool {
 public:
  // Throws std::invalid_argument for block_tokens not a positive multiple of 16 or no blocks,
  // std::bad_alloc when the address space is not there.
  CpuKvPool(const ModelConfig& config, const KvPoolShape& shape);
  ~CpuKvPool();
  CpuKvPool(const CpuKvPool&) = delete;
  CpuKvPool& operator=(const CpuKvPool&) = delete;

  int64_t block_tokens() const { return block_tokens_; }
  int64_t total_blocks() const { return total_blocks_; }
  kernels::KvType type() const { return type_; }
  size_t element_bytes() const { return kernels::kv_element_bytes(type_); }
  size_t block_bytes() const { return block_stride_ * element_bytes(); }

  // Elements of type(): float or uint16_t (IEEE half).
  void* pool() { return pool_; }
  const void* pool() const { return pool_; }
  size_t block_stride() const { return block_stride_; }  // in elements
  size_t key_offset(int64_t layer, int64_t kv_head) const;
  size_t value_offset(int64_t layer, int64_t kv_head) const;
  // The element index into pool() of the block of `block_table` holding `position`.
  size_t block_start(std::span<const BlockId> block_table, int64_t position) const;
  // Where `position` keeps the keys of `layer` and `kv_head` (head_dim elements, block_tokens()
  // apart) and its values (head_dim elements in a row).
  size_t key_index(std::span<const BlockId> block_table, int64_t position, int64_t layer,
                   int64_t kv_head) const;
  size_t value_index(std::span<const BlockId> block_table, int64_t position, int64_t layer,
                     int64_t kv_head) const;

 private:
  int64_t block_tokens_;
  int64_t total_blocks_;
  int64_t head_dim_;
  int64_t kv_heads_;
  kernels::KvType type_;
  size_t block_stride_;
  void* pool_ = nullptr;
};

}  // namespace chatflow::engine
