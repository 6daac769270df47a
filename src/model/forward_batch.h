// ForwardBatch: the new tokens of one forward, from any number of sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/paged_kv.h"

namespace tessera::model {

struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [num_tokens] new tokens, sequence after sequence
  backend::AttentionBatch attention;     // positions, query_start, block tables of the same tokens
  std::vector<int32_t> logit_rows;       // token indices whose logits are wanted (usually each sequence's last)
};

// One sequence's new `tokens` at positions [start, start + tokens.size()),
// its block table the blocks 0, 1, ... that hold positions up to the last of
// them, with logits for its last `logits_rows` tokens.
ForwardBatch sequence_batch(std::vector<int32_t> tokens, int32_t start, int64_t block_size, int64_t logits_rows = 1);

}  // namespace tessera::model
