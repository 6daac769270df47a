// KvCacheManager: each sequence's block table over one BlockPool, and the
// prefix cache on top of it.
//
// A sequence's block table row k holds positions [k*B, (k+1)*B) (B = block
// size). The manager never sees the cache memory itself; it decides which
// block ids a sequence writes and reads (see backend/paged_kv.h for the layout).
//
// Prefix caching: when a full block's keys and values have been computed, the
// scheduler calls `commit`, which publishes the block under its hash chain
// (kv/block_hash.h). A new sequence first calls `match_prefix` and passes the
// match to `allocate`, which shares those blocks (reference counted) instead of
// computing them again. Blocks are published only after their step succeeded,
// so a failed step never leaves wrong contents findable.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace tessera::kv {

using SeqId = uint64_t;

struct PrefixMatch {
  std::vector<BlockId> blocks;    // cached blocks covering tokens [0, num_tokens)
  std::vector<BlockHash> hashes;  // their hash chain
  int64_t num_tokens = 0;         // blocks.size() * block_size
  int64_t num_query_tokens = 0;   // the tokens the match was asked about
};

struct KvStats {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t used_blocks = 0;          // held by at least one sequence
  int64_t free_blocks = 0;          // allocatable (cached or not)
  int64_t cached_blocks = 0;        // findable by hash
  int64_t prefix_query_tokens = 0;  // prompt tokens of admitted sequences
  int64_t prefix_hit_tokens = 0;    // of those, served from the prefix cache
};

class KvCacheManager {
 public:
  KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);

  int64_t block_size() const { return pool_.block_size(); }
  int64_t num_blocks() const { return pool_.num_blocks(); }
  const BlockPool& pool() const { return pool_; }

  // The longest run of cached full blocks that prefixes `tokens`, leaving at
  // least one token uncovered (its logits are needed). Empty when disabled.
  PrefixMatch match_prefix(std::span<const int32_t> tokens) const;

  // The first full blocks of `from`'s table that lie within its first
  // `num_tokens` tokens, as a match for a sequence whose tokens equal `from`'s
  // that far (another choice of the same prompt): passed to allocate like a
  // match_prefix result, with prefix caching on or off. num_query_tokens: the
  // new sequence's token count (the hit statistics). Empty for an unknown id.
  PrefixMatch share_blocks(SeqId from, int64_t num_tokens, int64_t num_query_tokens) const;

  // Gives `seq` blocks for positions [0, num_tokens). A sequence new to the
  // manager takes `prefix`'s blocks first (pass the match_prefix result, or
  // null). Returns false and changes nothing when the pool is short.
  bool allocate(SeqId seq, int64_t num_tokens, const PrefixMatch* prefix = nullptr);

  // Publishes the full blocks among seq's first `num_computed` tokens (`tokens`
  // are the sequence's tokens, at least `num_computed` of them).
  void commit(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed);

  // Releases seq's blocks (the last block first, so a sequence's tail is
  // evicted before its more shareable head). Unknown ids are ignored.
  void free(SeqId seq);

  bool contains(SeqId seq) const { return tables_.count(seq) != 0; }
  // [num blocks of seq] block ids, position p in entry p / block_size.
  const std::vector<BlockId>& block_table(SeqId seq) const;

  KvStats stats() const;

 private:
  struct SeqBlocks {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;  // hash chain of the first hashes.size() (committed) blocks
  };

  BlockPool pool_;
  bool prefix_caching_;
  std::unordered_map<SeqId, SeqBlocks> tables_;
  int64_t query_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace tessera::kv
