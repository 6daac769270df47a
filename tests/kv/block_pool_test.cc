// BlockPool: reference counts, the two free lists and LRU eviction of cached blocks.
#include <gtest/gtest.h>

#include <numeric>

#include "kv/block_pool.h"

namespace tessera::kv {
namespace {

std::vector<int32_t> tokens_of(int32_t first, int64_t count) {
  std::vector<int32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(kvBlockPool, AllocatesUntilEmptyThenReturnsNullopt) {
  BlockPool pool(4, 16);
  auto a = pool.allocate(3);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.num_used(), 3);
  EXPECT_FALSE(pool.allocate(2).has_value());
  EXPECT_EQ(pool.num_free(), 1);  // a failed allocation changes nothing
  for (BlockId b : *a) pool.release(b);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_TRUE(pool.allocate(4).has_value());
}

TEST(kvBlockPool, ReferenceCountsKeepSharedBlocksHeld) {
  BlockPool pool(2, 4);
  BlockId b = pool.allocate(1)->front();
  const auto t = tokens_of(0, 4);
  ASSERT_TRUE(pool.publish(b, 42, kRootHash, t));
  pool.acquire(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 1);  // still held once
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_TRUE(pool.is_cached(b));  // free but still findable
  EXPECT_EQ(pool.lookup(42, kRootHash, t), b);
  pool.acquire(b);  // a hit takes it off the free list
  EXPECT_EQ(pool.num_free(), 1);
}

TEST(kvBlockPool, LookupComparesParentAndTokensNotOnlyTheHash) {
  BlockPool pool(1, 4);
  BlockId b = pool.allocate(1)->front();
  ASSERT_TRUE(pool.publish(b, 7, kRootHash, tokens_of(0, 4)));
  EXPECT_FALSE(pool.lookup(7, kRootHash, tokens_of(1, 4)).has_value());
  EXPECT_FALSE(pool.lookup(7, 123, tokens_of(0, 4)).has_value());
  EXPECT_TRUE(pool.lookup(7, kRootHash, tokens_of(0, 4)).has_value());
}

TEST(kvBlockPool, UncachedBlocksGoFirstThenLeastRecentlyUsedCachedOnes) {
  BlockPool pool(4, 2);
  auto blocks = *pool.allocate(4);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.publish(blocks[i], 100 + i, kRootHash, tokens_of(i, 2)));
  // Released in the order 1, 0, 2: LRU order. Block 3 is uncached.
  pool.release(blocks[1]);
  pool.release(blocks[0]);
  pool.release(blocks[2]);
  pool.release(blocks[3]);
  EXPECT_EQ(pool.num_cached(), 3);
  EXPECT_EQ(*pool.allocate(1), std::vector<BlockId>{blocks[3]});
  EXPECT_EQ(pool.num_cached(), 3);  // no eviction needed
  EXPECT_EQ(*pool.allocate(1), std::vector<BlockId>{blocks[1]});  // least recently released
  EXPECT_FALSE(pool.lookup(101, kRootHash, tokens_of(1, 2)).has_value());
  EXPECT_EQ(*pool.allocate(1), std::vector<BlockId>{blocks[0]});
  EXPECT_TRUE(pool.lookup(102, kRootHash, tokens_of(2, 2)).has_value());
  EXPECT_EQ(pool.num_cached(), 1);
}

TEST(kvBlockPool, ADuplicateHashStaysPrivate) {
  BlockPool pool(2, 2);
  auto blocks = *pool.allocate(2);
  EXPECT_TRUE(pool.publish(blocks[0], 5, kRootHash, tokens_of(0, 2)));
  EXPECT_FALSE(pool.publish(blocks[1], 5, kRootHash, tokens_of(0, 2)));
  EXPECT_FALSE(pool.is_cached(blocks[1]));
  EXPECT_EQ(pool.lookup(5, kRootHash, tokens_of(0, 2)), blocks[0]);
}

}  // namespace
}  // namespace tessera::kv
