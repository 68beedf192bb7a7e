// The paged KV cache: the host's block bookkeeping (KvBlockAllocator) and the layout of the CPU
// backend's pool.
#include <gtest/gtest.h>

#include "framework/engine/cpu/cpu_kv_pool.h"
#include "framework/engine/kv_block_allocator.h"

namespace chatflow::engine {
namespace {

ModelConfig tiny_config() {
  ModelConfig config;
  config.layers = 2;
  config.kv_heads = 2;
  config.head_dim = 8;
  return config;
}

TEST(KvCacheBlocks, ReserveAllocatesWholeBlocksAllOrNothing) {
  KvBlockAllocator cache(16, 4);
  KvSequence a, b;
  EXPECT_TRUE(reserve(cache, a, 17));  // two blocks
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(cache.free_blocks(), 2);
  EXPECT_TRUE(reserve(cache, a, 32));  // still two
  EXPECT_EQ(cache.free_blocks(), 2);
  EXPECT_FALSE(reserve(cache, b, 48)) << "three blocks do not fit in two";
  EXPECT_TRUE(b.blocks.empty()) << "a failed reservation takes nothing";
  EXPECT_EQ(cache.free_blocks(), 2);
  release(cache, a);
  EXPECT_EQ(cache.free_blocks(), 4);
  EXPECT_TRUE(a.blocks.empty());
}

TEST(KvCacheBlocks, SharedBlocksReturnOnlyWithTheLastReference) {
  KvBlockAllocator cache(16, 2);
  BlockId block = *cache.allocate();
  cache.retain(block);
  EXPECT_EQ(cache.references(block), 2);
  cache.release(block);
  EXPECT_EQ(cache.free_blocks(), 1);
  cache.release(block);
  EXPECT_EQ(cache.free_blocks(), 2);
  EXPECT_THROW(cache.release(block), std::logic_error);
}

TEST(KvCacheBlocks, BlockSizeMustBeAMultipleOfSixteen) {
  EXPECT_THROW(KvBlockAllocator(12, 4), std::invalid_argument);
  EXPECT_THROW(CpuKvPool(tiny_config(), {4, 12, kernels::KvType::f16}), std::invalid_argument);
}

TEST(KvCachePool, KeyAndValueRegionsDoNotOverlap) {
  CpuKvPool cache(tiny_config(), {1, 16, kernels::KvType::f16});
  size_t region = 8 * 16;
  EXPECT_EQ(cache.block_stride(), 2u * 2 * 2 * region);
  EXPECT_EQ(cache.key_offset(0, 1), region);
  EXPECT_EQ(cache.value_offset(0, 0), 2 * region);
  EXPECT_EQ(cache.key_offset(1, 0), 4 * region);
  EXPECT_EQ(cache.value_offset(1, 1), 7 * region);
}

}  // namespace
}  // namespace chatflow::engine
