#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::kv {

KvCacheManager::KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : pool_(num_blocks, block_size), prefix_caching_(enable_prefix_caching) {}

PrefixMatch KvCacheManager::match_prefix(std::span<const int32_t> tokens) const {
  PrefixMatch match;
  match.num_query_tokens = static_cast<int64_t>(tokens.size());
  if (!prefix_caching_ || tokens.empty()) return match;
  const int64_t bs = block_size();
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / bs;  // keep one token to compute
  BlockHash parent = kRootHash;
  for (int64_t k = 0; k < max_blocks; ++k) {
    auto block_tokens = tokens.subspan(k * bs, bs);
    const BlockHash hash = hash_block(parent, block_tokens);
    std::optional<BlockId> block = pool_.lookup(hash, parent, block_tokens);
    if (!block) break;
    match.blocks.push_back(*block);
    match.hashes.push_back(hash);
    parent = hash;
  }
  match.num_tokens = static_cast<int64_t>(match.blocks.size()) * bs;
  return match;
}

PrefixMatch KvCacheManager::share_blocks(SeqId from, int64_t num_tokens, int64_t num_query_tokens) const {
  PrefixMatch match;
  match.num_query_tokens = num_query_tokens;
  auto it = tables_.find(from);
  if (it == tables_.end() || num_tokens <= 0) return match;
  const SeqBlocks& entry = it->second;
  const size_t blocks = std::min(static_cast<size_t>(num_tokens / block_size()), entry.blocks.size());
  match.blocks.assign(entry.blocks.begin(), entry.blocks.begin() + static_cast<std::ptrdiff_t>(blocks));
  // The hash chain of those blocks where `from` has published them.
  match.hashes.assign(entry.hashes.begin(),
                      entry.hashes.begin() + static_cast<std::ptrdiff_t>(std::min(blocks, entry.hashes.size())));
  match.num_tokens = static_cast<int64_t>(blocks) * block_size();
  return match;
}

bool KvCacheManager::allocate(SeqId seq, int64_t num_tokens, const PrefixMatch* prefix) {
  auto it = tables_.find(seq);
  const bool fresh = it == tables_.end();
  const std::vector<BlockId> no_blocks;
  const std::vector<BlockId>& shared = (fresh && prefix) ? prefix->blocks : no_blocks;
  const int64_t have = fresh ? static_cast<int64_t>(shared.size()) : static_cast<int64_t>(it->second.blocks.size());
  const int64_t want = (num_tokens + block_size() - 1) / block_size();
  const int64_t extra = std::max<int64_t>(0, want - have);
  // Shared blocks nobody holds now stop being free once acquired.
  int64_t shared_free = 0;
  for (BlockId b : shared) shared_free += pool_.ref_count(b) == 0 ? 1 : 0;
  if (extra > pool_.num_free() - shared_free) return false;

  // Acquire the shared blocks before allocating, so allocation cannot evict them.
  SeqBlocks& entry = tables_[seq];
  if (fresh) {
    for (BlockId b : shared) pool_.acquire(b);
    entry.blocks = shared;
    if (prefix) entry.hashes = prefix->hashes;
    if (prefix) {
      query_tokens_ += prefix->num_query_tokens;
      hit_tokens_ += prefix->num_tokens;
    }
  }
  std::optional<std::vector<BlockId>> fresh_blocks = pool_.allocate(extra);
  TESSERA_CHECK(fresh_blocks.has_value());  // counted above
  entry.blocks.insert(entry.blocks.end(), fresh_blocks->begin(), fresh_blocks->end());
  return true;
}

void KvCacheManager::commit(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed) {
  auto it = tables_.find(seq);
  TESSERA_CHECK(it != tables_.end() && static_cast<int64_t>(tokens.size()) >= num_computed);
  if (!prefix_caching_) return;
  SeqBlocks& entry = it->second;
  const int64_t bs = block_size();
  const int64_t full = std::min<int64_t>(num_computed / bs, static_cast<int64_t>(entry.blocks.size()));
  for (int64_t k = static_cast<int64_t>(entry.hashes.size()); k < full; ++k) {
    const BlockHash parent = k == 0 ? kRootHash : entry.hashes[k - 1];
    auto block_tokens = tokens.subspan(k * bs, bs);
    const BlockHash hash = hash_block(parent, block_tokens);
    pool_.publish(entry.blocks[k], hash, parent, block_tokens);  // a duplicate stays private
    entry.hashes.push_back(hash);
  }
}

void KvCacheManager::free(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  const std::vector<BlockId>& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool_.release(*b);
  tables_.erase(it);
}

const std::vector<BlockId>& KvCacheManager::block_table(SeqId seq) const {
  auto it = tables_.find(seq);
  TESSERA_CHECK(it != tables_.end());
  return it->second.blocks;
}

KvStats KvCacheManager::stats() const {
  KvStats s;
  s.num_blocks = pool_.num_blocks();
  s.block_size = pool_.block_size();
  s.used_blocks = pool_.num_used();
  s.free_blocks = pool_.num_free();
  s.cached_blocks = pool_.num_cached();
  s.prefix_query_tokens = query_tokens_;
  s.prefix_hit_tokens = hit_tokens_;
  return s;
}

}  // namespace tessera::kv
