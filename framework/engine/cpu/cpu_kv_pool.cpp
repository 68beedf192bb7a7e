#include "framework/engine/cpu/cpu_kv_pool.h"

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace chatflow::engine {

CpuKvPool::CpuKvPool(const ModelConfig& config, const KvPoolShape& shape)
    : block_tokens_(shape.block_tokens),
      total_blocks_(shape.blocks),
      head_dim_(config.head_dim),
      kv_heads_(config.kv_heads),
      type_(shape.type) {
  if (block_tokens_ <= 0 || block_tokens_ % 16 != 0) {
    throw std::invalid_argument("KV cache block_tokens must be a positive multiple of 16, got " +
                                std::to_string(block_tokens_));
  }
  if (total_blocks_ <= 0) throw std::invalid_argument("KV cache needs at least one block");
  const int64_t block_values = kernels::kv_block_values(type_);
  if (head_dim_ % block_values != 0) {
    throw std::invalid_argument("a " + std::string(kernels::to_string(type_)) +
                                " KV cache stores heads in blocks of " +
                                std::to_string(block_values) +
                                " values; this model's head_dim is " + std::to_string(head_dim_));
  }
  row_bytes_ = kernels::kv_row_bytes(type_, head_dim_);
  block_stride_ = static_cast<size_t>(config.layers * 2 * kv_heads_) * region_bytes();
  // calloc: zeroed pages are mapped lazily, so an unused cache costs no memory.
  pool_ = std::calloc(static_cast<size_t>(total_blocks_), block_stride_);
  if (pool_ == nullptr) throw std::bad_alloc();
}

CpuKvPool::~CpuKvPool() {
  std::free(pool_);
}

size_t CpuKvPool::key_offset(int64_t layer, int64_t kv_head) const {
  return static_cast<size_t>((layer * 2) * kv_heads_ + kv_head) * region_bytes();
}

size_t CpuKvPool::value_offset(int64_t layer, int64_t kv_head) const {
  return static_cast<size_t>((layer * 2 + 1) * kv_heads_ + kv_head) * region_bytes();
}

size_t CpuKvPool::block_start(std::span<const BlockId> block_table, int64_t position) const {
  return static_cast<size_t>(block_table[static_cast<size_t>(position / block_tokens_)]) *
         block_stride_;
}

size_t CpuKvPool::key_index(std::span<const BlockId> block_table, int64_t position, int64_t layer,
                            int64_t kv_head) const {
  const auto slot = static_cast<size_t>(position % block_tokens_);
  // Plain types keep a position's keys one element apart within each dimension's run.
  const size_t within =
      type_ == kernels::KvType::q8_0 ? slot * row_bytes_ : slot * kernels::kv_row_bytes(type_, 1);
  return block_start(block_table, position) + key_offset(layer, kv_head) + within;
}

size_t CpuKvPool::value_index(std::span<const BlockId> block_table, int64_t position, int64_t layer,
                              int64_t kv_head) const {
  return block_start(block_table, position) + value_offset(layer, kv_head) +
         static_cast<size_t>(position % block_tokens_) * row_bytes_;
}

}  // namespace chatflow::engine
