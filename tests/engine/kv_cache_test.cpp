// The paged KV cache's block bookkeeping.
#include "framework/engine/kv_cache.h"

#include <gtest/gtest.h>

namespace chatflow::engine {
namespace {

ModelConfig tiny_config() {
  ModelConfig config;
  config.layers = 2;
  config.kv_heads = 2;
  config.head_dim = 8;
  return config;
}

TEST(KvCache, ReserveAllocatesWholeBlocksAllOrNothing) {
  KvCache cache(tiny_config(), 16, 4);
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

TEST(KvCache, SharedBlocksReturnOnlyWithTheLastReference) {
  KvCache cache(tiny_config(), 16, 2);
  BlockId block = *cache.allocate();
  cache.retain(block);
  EXPECT_EQ(cache.references(block), 2);
  cache.release(block);
  EXPECT_EQ(cache.free_blocks(), 1);
  cache.release(block);
  EXPECT_EQ(cache.free_blocks(), 2);
  EXPECT_THROW(cache.release(block), std::logic_error);
}

TEST(KvCache, BlockSizeMustBeAMultipleOfSixteen) {
  EXPECT_THROW(KvCache(tiny_config(), 12, 4), std::invalid_argument);
}

TEST(KvCache, KeyAndValueRegionsDoNotOverlap) {
  KvCache cache(tiny_config(), 16, 1);
  size_t region = 8 * 16;
  EXPECT_EQ(cache.block_stride(), 2u * 2 * 2 * region);
  EXPECT_EQ(cache.key_offset(0, 1), region);
  EXPECT_EQ(cache.value_offset(0, 0), 2 * region);
  EXPECT_EQ(cache.key_offset(1, 0), 4 * region);
  EXPECT_EQ(cache.value_offset(1, 1), 7 * region);
}

}  // namespace
}  // namespace chatflow::engine
