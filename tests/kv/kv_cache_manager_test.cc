// KvCacheManager: block tables grow with a sequence, out-of-blocks is a plain
// false, and prefix caching shares full blocks matched by their hash chain.
#include <gtest/gtest.h>

#include <numeric>

#include "kv/block_hash.h"
#include "kv/kv_cache_manager.h"

namespace tessera::kv {
namespace {

std::vector<int32_t> tokens_of(int32_t first, int64_t count) {
  std::vector<int32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(kvBlockHash, ChainsOverTheParent) {
  const auto a = tokens_of(0, 4);
  const auto b = tokens_of(4, 4);
  EXPECT_EQ(hash_block(kRootHash, a), hash_block(kRootHash, a));
  EXPECT_NE(hash_block(kRootHash, a), hash_block(kRootHash, b));
  // The same block after a different prefix hashes differently.
  EXPECT_NE(hash_block(hash_block(kRootHash, a), b), hash_block(hash_block(kRootHash, b), b));
  auto chain = hash_full_blocks(tokens_of(0, 10), 4);  // two full blocks; the last two tokens are not hashed
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain[1], hash_block(hash_block(kRootHash, a), b));
}

TEST(kvCacheManager, TablesGrowByBlockAndFailCleanly) {
  KvCacheManager kv(4, 4, /*enable_prefix_caching=*/false);
  ASSERT_TRUE(kv.allocate(1, 5));  // 2 blocks
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate(1, 8));  // still 2
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate(2, 8));
  EXPECT_FALSE(kv.allocate(1, 9));  // would need a fifth block
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_FALSE(kv.allocate(3, 1));
  EXPECT_FALSE(kv.contains(3));
  kv.free(2);
  EXPECT_TRUE(kv.allocate(1, 9));
  EXPECT_EQ(kv.stats().used_blocks, 3);
  EXPECT_EQ(kv.stats().free_blocks, 1);
}

TEST(kvCacheManager, PrefixHitSharesCommittedFullBlocks) {
  KvCacheManager kv(8, 4, true);
  const auto prompt = tokens_of(10, 11);  // 2 full blocks + 3 tokens
  ASSERT_TRUE(kv.allocate(1, 11, nullptr));
  EXPECT_TRUE(kv.match_prefix(prompt).blocks.empty());  // nothing committed yet
  kv.commit(1, prompt, 11);
  EXPECT_EQ(kv.stats().cached_blocks, 2);

  PrefixMatch match = kv.match_prefix(prompt);
  ASSERT_EQ(match.blocks.size(), 2u);
  EXPECT_EQ(match.num_tokens, 8);
  ASSERT_TRUE(kv.allocate(2, 11, &match));
  EXPECT_EQ(kv.block_table(2)[0], kv.block_table(1)[0]);
  EXPECT_EQ(kv.block_table(2)[1], kv.block_table(1)[1]);
  EXPECT_NE(kv.block_table(2)[2], kv.block_table(1)[2]);
  EXPECT_EQ(kv.pool().ref_count(kv.block_table(1)[0]), 2);
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 8);
  EXPECT_EQ(kv.stats().prefix_query_tokens, 11);

  // A different second block matches only the first.
  auto other = prompt;
  other[5] = 999;
  EXPECT_EQ(kv.match_prefix(other).blocks.size(), 1u);
}

TEST(kvCacheManager, MatchLeavesTheLastTokenToCompute) {
  KvCacheManager kv(4, 4, true);
  const auto prompt = tokens_of(0, 8);  // exactly two blocks
  ASSERT_TRUE(kv.allocate(1, 8));
  kv.commit(1, prompt, 8);
  EXPECT_EQ(kv.match_prefix(prompt).blocks.size(), 1u);  // the last block must be recomputed for logits
}

TEST(kvCacheManager, FreedCachedBlocksServeLaterSequencesUntilEvicted) {
  KvCacheManager kv(3, 2, true);
  const auto prompt = tokens_of(0, 5);
  ASSERT_TRUE(kv.allocate(1, 5));
  kv.commit(1, prompt, 4);
  kv.free(1);
  EXPECT_EQ(kv.stats().free_blocks, 3);
  EXPECT_EQ(kv.stats().cached_blocks, 2);
  PrefixMatch match = kv.match_prefix(prompt);
  ASSERT_EQ(match.blocks.size(), 2u);
  // The match's own free blocks do not count as free for the rest: 2 shared + 1 new = all 3.
  ASSERT_TRUE(kv.allocate(2, 5, &match));
  EXPECT_EQ(kv.stats().free_blocks, 0);
  kv.free(2);
  // A sequence that needs every block evicts the cached ones.
  ASSERT_TRUE(kv.allocate(3, 6));
  EXPECT_EQ(kv.stats().cached_blocks, 0);
  EXPECT_TRUE(kv.match_prefix(prompt).blocks.empty());
}

TEST(kvCacheManager, SharedFreeBlocksAreNotDoubleCounted) {
  KvCacheManager kv(3, 2, true);
  const auto prompt = tokens_of(0, 5);
  ASSERT_TRUE(kv.allocate(1, 5));
  kv.commit(1, prompt, 4);
  kv.free(1);
  PrefixMatch match = kv.match_prefix(prompt);
  ASSERT_EQ(match.blocks.size(), 2u);
  // Needs 4 blocks: the 2 shared ones are free now, but they cannot also be the 2 new ones.
  EXPECT_FALSE(kv.allocate(2, 8, &match));
  EXPECT_FALSE(kv.contains(2));
  EXPECT_EQ(kv.stats().free_blocks, 3);
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 0);
}

}  // namespace
}  // namespace tessera::kv

namespace tessera::kv {
namespace {

// share_blocks: whole blocks within the asked tokens, with prefix caching off
// too; the hash chain only as far as the owner published it; the shared
// blocks stay held until both sequences free them.
TEST(kvCacheManager, ShareBlocksGivesWholeBlocksOfAnotherSequence) {
  for (bool caching : {false, true}) {
    KvCacheManager kv(8, 4, caching);
    const auto tokens = tokens_of(0, 11);
    ASSERT_TRUE(kv.allocate(1, 11));
    kv.commit(1, tokens, 11);
    const PrefixMatch match = kv.share_blocks(1, 10, 11);
    ASSERT_EQ(match.blocks.size(), 2u) << "caching " << caching;
    EXPECT_EQ(match.num_tokens, 8);
    EXPECT_EQ(match.hashes.size(), caching ? 2u : 0u);
    ASSERT_TRUE(kv.allocate(2, 11, &match));
    EXPECT_EQ(kv.block_table(2)[0], kv.block_table(1)[0]);
    EXPECT_NE(kv.block_table(2)[2], kv.block_table(1)[2]);
    EXPECT_EQ(kv.pool().ref_count(kv.block_table(1)[1]), 2);
    const BlockId shared = kv.block_table(1)[0];
    kv.free(1);
    EXPECT_EQ(kv.pool().ref_count(shared), 1);
    EXPECT_TRUE(kv.share_blocks(1, 10, 11).blocks.empty()) << "a freed sequence still shared its blocks";
    EXPECT_TRUE(kv.share_blocks(2, 3, 11).blocks.empty()) << "less than a block shares nothing";
  }
}

}  // namespace
}  // namespace tessera::kv
