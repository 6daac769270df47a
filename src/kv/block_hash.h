// Block hashes for prefix caching.
//
// A full block is identified by the hash of (its parent block's hash, its
// token ids), so equal hashes mean equal whole prefixes, not only equal blocks:
//   h[0] = XXH3_64bits(kRootHash | tokens[0, B))
//   h[k] = XXH3_64bits(h[k-1]    | tokens[k*B, (k+1)*B))
// The pool also keeps each cached block's parent hash and tokens and compares
// them on a lookup, so a 64-bit collision cannot hand out a wrong block.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::kv {

using BlockHash = uint64_t;

// The parent hash of a sequence's first block.
inline constexpr BlockHash kRootHash = 0x7465737365726101ull;

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens);

// Hashes of the full blocks of `tokens` (tokens.size() / block_size of them), in order.
std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int64_t block_size);

}  // namespace tessera::kv
