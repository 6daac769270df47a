// An attention step for the attention tests: sequences of given context
// lengths, each bringing its last new_tokens[s] tokens, their blocks a
// shuffled range of [0, sequences * max_blocks_per_seq).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/paged_kv.h"

namespace tessera::testing {

inline backend::AttentionBatch shuffled_attention_batch(const std::vector<int32_t>& context_lens,
                                                        const std::vector<int32_t>& new_tokens, int64_t block_size,
                                                        int64_t window, uint32_t seed) {
  backend::AttentionBatch batch;
  batch.sliding_window = window;
  const int64_t seqs = static_cast<int64_t>(context_lens.size());
  int32_t max_blocks = 1;
  for (int32_t len : context_lens) {
    max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>((len + block_size - 1) / block_size));
  }
  batch.max_blocks_per_seq = max_blocks;
  batch.block_tables.resize(seqs * max_blocks);
  std::iota(batch.block_tables.begin(), batch.block_tables.end(), 0);
  std::shuffle(batch.block_tables.begin(), batch.block_tables.end(), std::mt19937(seed));
  batch.query_start = {0};
  for (int64_t s = 0; s < seqs; ++s) {
    for (int32_t p = context_lens[s] - new_tokens[s]; p < context_lens[s]; ++p) batch.positions.push_back(p);
    batch.query_start.push_back(static_cast<int32_t>(batch.positions.size()));
  }
  return batch;
}

}  // namespace tessera::testing
