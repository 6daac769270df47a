// The warm-up forward of the memory plan (DESIGN: the KV cache is sized after
// measuring peak activation memory, never before): the largest step the
// configuration allows, run once on a scratch cache, its peak allocation
// read from the backend's allocator.
#pragma once

#include <cstdint>
#include <optional>

#include "model/transformer.h"

namespace tessera::engine {

struct WarmupResult {
  size_t workspace_bytes = 0;  // the forward's peak allocation above what was in use before it
  int64_t step_tokens = 0;
  int64_t logits_rows = 0;
};

// Runs one forward of `step_tokens` new tokens of one sequence with logits
// for its last `logits_rows` tokens (a step of --max-prefill-token-num tokens
// and --max-batch-size sampling rows is no larger) over a cache of just the
// blocks it needs. nullopt when the backend's allocator does not count bytes;
// Error(kOutOfMemory) with the flags to change when the step does not fit.
std::optional<WarmupResult> measure_workspace(model::Transformer& model, int64_t step_tokens, int64_t logits_rows,
                                              int64_t block_size);

}  // namespace tessera::engine
