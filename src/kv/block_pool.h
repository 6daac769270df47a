// BlockPool: the KV cache's blocks as host metadata — reference counts, the
// free lists, and the prefix cache's map from block hash to block.
//
// Invariants:
//  - every block is in exactly one of: held (ref_count > 0), free and never
//    cached (`uncached_`), free and cached (`evictable_`, least recently
//    released first);
//  - a block is in `cached_` (hash -> block) iff it has a hash; its contents
//    are then immutable until it is evicted;
//  - allocation takes uncached free blocks first and only then evicts cached
//    ones, least recently used first, so a reusable prefix survives as long as
//    possible.
// Running out of blocks is a normal result (nullopt), not an error.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace tessera::kv {

using BlockId = int32_t;

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, int64_t block_size);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  // Blocks with no holder (allocatable, cached or not).
  int64_t num_free() const { return static_cast<int64_t>(uncached_.size() + evictable_.size()); }
  int64_t num_used() const { return num_blocks() - num_free(); }
  // Blocks findable by hash (held or free).
  int64_t num_cached() const { return static_cast<int64_t>(cached_.size()); }
  int32_t ref_count(BlockId block) const { return blocks_.at(block).ref_count; }
  bool is_cached(BlockId block) const { return blocks_.at(block).hash.has_value(); }

  // `count` blocks, each with ref_count 1, or nullopt (and no change) when fewer are free.
  std::optional<std::vector<BlockId>> allocate(int64_t count);
  // One more holder of `block` (a prefix-cache hit); a free block leaves the free list.
  void acquire(BlockId block);
  // One holder fewer; at zero the block becomes free (most recently used if cached).
  void release(BlockId block);

  // The cached block whose parent hash and tokens are exactly these, if any.
  std::optional<BlockId> lookup(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) const;
  // Makes a held, full block findable under `hash`. Returns false (and leaves
  // the block uncached) when another block already holds the same hash.
  bool publish(BlockId block, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens);

 private:
  struct Block {
    int32_t ref_count = 0;
    std::optional<BlockHash> hash;
    BlockHash parent = 0;
    std::vector<int32_t> tokens;                   // [block_size] when cached
    std::list<BlockId>::iterator evictable_pos;    // valid while in evictable_
  };
  void evict(BlockId block);

  int64_t block_size_;
  std::vector<Block> blocks_;
  std::vector<BlockId> uncached_;                  // free, no hash (a stack)
  std::list<BlockId> evictable_;                   // free, cached; front = least recently used
  std::unordered_map<BlockHash, BlockId> cached_;
};

}  // namespace tessera::kv
