// Small helpers to run a Transformer in tests: one sequence or several, with
// a fresh paged cache each time.
#pragma once

#include <vector>

#include "model/transformer.h"

namespace tessera::testing {

// Logits [len(ids), vocab] of one full prefill with a fresh cache; rows for every position.
inline Tensor prefill_all_logits(model::Transformer& model, const std::vector<int32_t>& ids, int64_t block_size = 16) {
  const int64_t blocks = (static_cast<int64_t>(ids.size()) + block_size - 1) / block_size;
  backend::PagedKvCache cache = model.allocate_cache(blocks, block_size);
  return model.forward(model::sequence_batch(ids, 0, block_size, static_cast<int64_t>(ids.size())), cache);
}

}  // namespace tessera::testing
