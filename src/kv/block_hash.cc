#include "kv/block_hash.h"

#include <xxhash.h>

#include <cstring>

namespace tessera::kv {

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) {
  // One contiguous message: 8 bytes of parent hash, then the token ids as stored.
  std::vector<unsigned char> message(sizeof(parent) + tokens.size_bytes());
  std::memcpy(message.data(), &parent, sizeof(parent));
  if (!tokens.empty()) std::memcpy(message.data() + sizeof(parent), tokens.data(), tokens.size_bytes());
  return XXH3_64bits(message.data(), message.size());
}

std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int64_t block_size) {
  std::vector<BlockHash> hashes;
  const int64_t full = static_cast<int64_t>(tokens.size()) / block_size;
  BlockHash parent = kRootHash;
  for (int64_t k = 0; k < full; ++k) {
    parent = hash_block(parent, tokens.subspan(k * block_size, block_size));
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace tessera::kv
