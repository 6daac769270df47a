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

}  // namespace tessera::model
