// EngineConfig: the serving engine's limits, fixed at start-up (the memory plan,
// memory_plan.h, decides num_blocks and the session length that fits).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduler.h"

namespace tessera::engine {

struct EngineConfig {
  SchedulerConfig scheduler;          // --max-batch-size, --max-prefill-token-num
  int64_t block_size = 64;            // tokens per KV block (--cache-block-seq-len)
  int64_t num_blocks = 0;             // KV blocks in the cache
  int64_t session_len = 0;            // tokens per sequence (prompt + output); <= num_blocks * block_size
  bool enable_prefix_caching = true;
  std::vector<int32_t> eos_ids;       // the model's; a request may add stop ids
};

// Throws Error(kInvalidArgument) naming the flag when a value is out of range.
void validate(const EngineConfig& config);

}  // namespace tessera::engine
