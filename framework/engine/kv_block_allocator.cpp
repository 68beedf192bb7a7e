#include "framework/engine/kv_block_allocator.h"

#include <stdexcept>
#include <string>

namespace chatflow::engine {

KvBlockAllocator::KvBlockAllocator(int64_t block_tokens, int64_t blocks)
    : block_tokens_(block_tokens) {
  if (block_tokens <= 0 || block_tokens % 16 != 0) {
    throw std::invalid_argument("KV cache block_tokens must be a positive multiple of 16, got " +
                                std::to_string(block_tokens));
  }
  if (blocks <= 0) throw std::invalid_argument("KV cache needs at least one block");
  references_.assign(static_cast<size_t>(blocks), 0);
  free_list_.reserve(static_cast<size_t>(blocks));
  for (int64_t block = blocks - 1; block >= 0; --block)
    free_list_.push_back(static_cast<BlockId>(block));
}

std::optional<BlockId> KvBlockAllocator::allocate() {
  if (free_list_.empty()) return std::nullopt;
  BlockId block = free_list_.back();
  free_list_.pop_back();
  references_[static_cast<size_t>(block)] = 1;
  return block;
}

void KvBlockAllocator::retain(BlockId block) {
  ++references_[static_cast<size_t>(block)];
}

void KvBlockAllocator::release(BlockId block) {
  int32_t& count = references_[static_cast<size_t>(block)];
  if (count <= 0)
    throw std::logic_error("KV block " + std::to_string(block) + " released more often than held");
  if (--count == 0) free_list_.push_back(block);
}

bool reserve(KvBlockAllocator& allocator, KvSequence& sequence, int64_t length) {
  int64_t needed = (length + allocator.block_tokens() - 1) / allocator.block_tokens() -
                   static_cast<int64_t>(sequence.blocks.size());
  if (needed <= 0) return true;
  if (needed > allocator.free_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i)
    sequence.blocks.push_back(*allocator.allocate());
  return true;
}

void release(KvBlockAllocator& allocator, KvSequence& sequence) {
  for (BlockId block : sequence.blocks)
    allocator.release(block);
  sequence.blocks.clear();
  sequence.length = 0;
}

}  // namespace chatflow::engine
