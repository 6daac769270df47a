#include "kv/block_pool.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::kv {

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size) : block_size_(block_size) {
  TESSERA_CHECK(num_blocks >= 0 && block_size > 0);
  blocks_.resize(num_blocks);
  // A stack popped from the back: block 0 is handed out first.
  for (int64_t b = num_blocks - 1; b >= 0; --b) uncached_.push_back(static_cast<BlockId>(b));
}

std::optional<std::vector<BlockId>> BlockPool::allocate(int64_t count) {
  if (count < 0 || count > num_free()) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(count);
  while (static_cast<int64_t>(out.size()) < count) {
    BlockId block;
    if (!uncached_.empty()) {
      block = uncached_.back();
      uncached_.pop_back();
    } else {
      block = evictable_.front();
      evict(block);
    }
    blocks_[block].ref_count = 1;
    out.push_back(block);
  }
  return out;
}

void BlockPool::evict(BlockId block) {
  Block& b = blocks_[block];
  TESSERA_CHECK(b.ref_count == 0 && b.hash.has_value());
  evictable_.erase(b.evictable_pos);
  cached_.erase(*b.hash);
  b.hash.reset();
  b.tokens.clear();
}

void BlockPool::acquire(BlockId block) {
  Block& b = blocks_.at(block);
  if (b.ref_count == 0) {
    TESSERA_CHECK(b.hash.has_value());  // only cached blocks are shared
    evictable_.erase(b.evictable_pos);
  }
  ++b.ref_count;
}

void BlockPool::release(BlockId block) {
  Block& b = blocks_.at(block);
  TESSERA_CHECK(b.ref_count > 0);
  if (--b.ref_count > 0) return;
  if (b.hash) {
    b.evictable_pos = evictable_.insert(evictable_.end(), block);
  } else {
    uncached_.push_back(block);
  }
}

std::optional<BlockId> BlockPool::lookup(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  const Block& b = blocks_[it->second];
  if (b.parent != parent || !std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end())) {
    return std::nullopt;
  }
  return it->second;
}

bool BlockPool::publish(BlockId block, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) {
  Block& b = blocks_.at(block);
  TESSERA_CHECK(b.ref_count > 0 && static_cast<int64_t>(tokens.size()) == block_size_);
  if (b.hash) return *b.hash == hash;
  if (cached_.count(hash)) return false;
  b.hash = hash;
  b.parent = parent;
  b.tokens.assign(tokens.begin(), tokens.end());
  cached_.emplace(hash, block);
  return true;
}

}  // namespace tessera::kv
