// Small helpers to run a Transformer in tests: one sequence or several, with
// a fresh paged cache each time.
#pragma once

#include <numeric>
#include <vector>

#include "model/transformer.h"

namespace tessera::testing {

// Logits [len(ids), vocab] of one full prefill with a fresh cache; rows for every position.
inline Tensor prefill_all_logits(model::Transformer& model, const std::vector<int32_t>& ids, int64_t block_size = 16) {
  const int64_t blocks = (static_cast<int64_t>(ids.size()) + block_size - 1) / block_size;
  backend::PagedKvCache cache = model.allocate_cache(blocks, block_size);
  model::ForwardBatch batch;
  batch.token_ids = ids;
  batch.attention.positions.resize(ids.size());
  std::iota(batch.attention.positions.begin(), batch.attention.positions.end(), 0);
  batch.attention.query_start = {0, static_cast<int32_t>(ids.size())};
  batch.attention.block_tables.resize(blocks);
  std::iota(batch.attention.block_tables.begin(), batch.attention.block_tables.end(), 0);
  batch.attention.max_blocks_per_seq = static_cast<int32_t>(blocks);
  batch.logit_rows.resize(ids.size());
  std::iota(batch.logit_rows.begin(), batch.logit_rows.end(), 0);
  return model.forward(batch, cache);
}

}  // namespace tessera::testing
