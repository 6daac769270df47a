#include "model/forward_batch.h"

#include <algorithm>
#include <numeric>

namespace tessera::model {

ForwardBatch sequence_batch(std::vector<int32_t> tokens, int32_t start, int64_t block_size, int64_t logits_rows) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t blocks = (start + n + block_size - 1) / block_size;
  ForwardBatch batch;
  batch.token_ids = std::move(tokens);
  backend::AttentionBatch& a = batch.attention;
  a.positions.resize(n);
  std::iota(a.positions.begin(), a.positions.end(), start);
  a.query_start = {0, static_cast<int32_t>(n)};
  a.block_tables.resize(blocks);
  std::iota(a.block_tables.begin(), a.block_tables.end(), 0);
  a.max_blocks_per_seq = static_cast<int32_t>(blocks);
  logits_rows = std::clamp<int64_t>(logits_rows, 0, n);
  batch.logit_rows.resize(logits_rows);
  std::iota(batch.logit_rows.begin(), batch.logit_rows.end(), static_cast<int32_t>(n - logits_rows));
  return batch;
}

}  // namespace tessera::model
