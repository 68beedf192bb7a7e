// The CPU backend's KV pool: the memory of the paged KV cache whose block tables the scheduler
// keeps (kv_block_allocator.h). One calloc'ed pool of blocks; zeroed pages are mapped lazily, so
// blocks never used cost no memory.
//
// Block layout, per layer and key/value head: for f32 and f16, keys as [head_dim][block_tokens]
// (so attention scores for a run of positions come from one broadcast per dimension) and values
// as [block_tokens][head_dim]; for q8_0, keys and values both as [block_tokens] rows of
// head_dim / 32 Q8_0 blocks (a scale belongs to 32 values of one position's row, as llama.cpp
// quantises them). Offsets and indexes are in bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "framework/engine/backend.h"
#include "framework/engine/model_config.h"

namespace chatflow::engine {

class CpuKvPool {
 public:
  // Throws std::invalid_argument for block_tokens not a positive multiple of 16, no blocks, or
  // a head_dim that is not a whole number of the KV type's blocks (q8_0: 32 values);
  // std::bad_alloc when the address space is not there.
  CpuKvPool(const ModelConfig& config, const KvPoolShape& shape);
  ~CpuKvPool();
  CpuKvPool(const CpuKvPool&) = delete;
  CpuKvPool& operator=(const CpuKvPool&) = delete;

  int64_t block_tokens() const { return block_tokens_; }
  int64_t total_blocks() const { return total_blocks_; }
  kernels::KvType type() const { return type_; }
  // Bytes of one position's keys (or values) of one head.
  size_t row_bytes() const { return row_bytes_; }
  size_t block_bytes() const { return block_stride_; }
  // Bytes of one layer's and head's keys (or values) in a block.
  size_t region_bytes() const { return row_bytes_ * static_cast<size_t>(block_tokens_); }
  // Elements between a position's consecutive key dimensions: block_tokens() for the plain types
  // (keys stored by dimension), 1 for q8_0 (rows).
  int64_t key_dimension_stride() const {
    return type_ == kernels::KvType::q8_0 ? 1 : block_tokens_;
  }

  void* pool() { return pool_; }
  const void* pool() const { return pool_; }
  size_t block_stride() const { return block_stride_; }  // in bytes
  size_t key_offset(int64_t layer, int64_t kv_head) const;
  size_t value_offset(int64_t layer, int64_t kv_head) const;
  // The byte index into pool() of the block of `block_table` holding `position`.
  size_t block_start(std::span<const BlockId> block_table, int64_t position) const;
  // Where `position` keeps the keys of `layer` and `kv_head` (head_dim elements,
  // key_dimension_stride() apart, or one q8_0 row) and its values (one row).
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
  size_t row_bytes_;
  size_t block_stride_;
  void* pool_ = nullptr;
};

}  // namespace chatflow::engine
