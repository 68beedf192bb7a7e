#include "framework/engine/kv_cache.h"

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace chatflow::engine {

KvCache::KvCache(const ModelConfig& config, int64_t block_tokens, int64_t blocks,
                 kernels::KvType type)
    : block_tokens_(block_tokens),
      total_blocks_(blocks),
      head_dim_(config.head_dim),
      kv_heads_(config.kv_heads),
      type_(type) {
  if (block_tokens <= 0 || block_tokens % 16 != 0) {
    throw std::invalid_argument("KV cache block_tokens must be a positive multiple of 16, got " +
                                std::to_string(block_tokens));
  }
  if (blocks <= 0) throw std::invalid_argument("KV cache needs at least one block");
  block_stride_ = static_cast<size_t>(config.layers * 2 * kv_heads_ * head_dim_ * block_tokens_);
  // calloc: zeroed pages are mapped lazily, so an unused cache costs no memory.
  pool_ = std::calloc(block_stride_ * static_cast<size_t>(blocks), element_bytes());
  if (pool_ == nullptr) throw std::bad_alloc();
  references_.assign(static_cast<size_t>(blocks), 0);
  free_list_.reserve(static_cast<size_t>(blocks));
  for (int64_t block = blocks - 1; block >= 0; --block)
    free_list_.push_back(static_cast<BlockId>(block));
}

KvCache::~KvCache() {
  std::free(pool_);
}

std::optional<BlockId> KvCache::allocate() {
  if (free_list_.empty()) return std::nullopt;
  BlockId block = free_list_.back();
  free_list_.pop_back();
  references_[static_cast<size_t>(block)] = 1;
  return block;
}

void KvCache::retain(BlockId block) {
  ++references_[static_cast<size_t>(block)];
}

void KvCache::release(BlockId block) {
  int32_t& count = references_[static_cast<size_t>(block)];
  if (count <= 0)
    throw std::logic_error("KV block " + std::to_string(block) + " released more often than held");
  if (--count == 0) free_list_.push_back(block);
}

size_t KvCache::key_offset(int64_t layer, int64_t kv_head) const {
  return static_cast<size_t>(((layer * 2) * kv_heads_ + kv_head) * head_dim_ * block_tokens_);
}

size_t KvCache::value_offset(int64_t layer, int64_t kv_head) const {
  return static_cast<size_t>(((layer * 2 + 1) * kv_heads_ + kv_head) * head_dim_ * block_tokens_);
}

size_t KvCache::block_start(const KvSequence& sequence, int64_t position) const {
  return static_cast<size_t>(sequence.blocks[static_cast<size_t>(position / block_tokens_)]) *
         block_stride_;
}

size_t KvCache::key_index(const KvSequence& sequence, int64_t position, int64_t layer,
                          int64_t kv_head) const {
  return block_start(sequence, position) + key_offset(layer, kv_head) +
         static_cast<size_t>(position % block_tokens_);
}

size_t KvCache::value_index(const KvSequence& sequence, int64_t position, int64_t layer,
                            int64_t kv_head) const {
  return block_start(sequence, position) + value_offset(layer, kv_head) +
         static_cast<size_t>(position % block_tokens_ * head_dim_);
}

bool reserve(KvCache& cache, KvSequence& sequence, int64_t length) {
  int64_t needed = (length + cache.block_tokens() - 1) / cache.block_tokens() -
                   static_cast<int64_t>(sequence.blocks.size());
  if (needed <= 0) return true;
  if (needed > cache.free_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i)
    sequence.blocks.push_back(*cache.allocate());
  return true;
}

void release(KvCache& cache, KvSequence& sequence) {
  for (BlockId block : sequence.blocks)
    cache.release(block);
  sequence.blocks.clear();
  sequence.length = 0;
}

}  // namespace chatflow::engine
