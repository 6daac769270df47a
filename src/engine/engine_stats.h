// EngineStats: a snapshot for /metrics and logs, published by the engine loop
// after every step.
#pragma once

#include <cstdint>

#include "kv/kv_cache_manager.h"

namespace tessera::engine {

struct EngineStats {
  bool healthy = true;
  int64_t running = 0;                 // sequences holding KV blocks
  int64_t waiting = 0;                 // submitted, not running (preempted ones included)
  kv::KvStats kv;                      // blocks used / free / cached; prefix hit and query tokens
  int64_t steps = 0;
  int64_t computed_tokens = 0;         // tokens through the model (prompt, recompute and decode)
  int64_t generated_tokens = 0;        // sampled tokens
  int64_t preemptions = 0;
  int64_t finished_requests = 0;       // every finish reason
  int64_t failed_requests = 0;         // finish reason error
  double generated_tokens_per_second = 0.0;  // over the last few seconds
  double computed_tokens_per_second = 0.0;

  double prefix_hit_rate() const {
    return kv.prefix_query_tokens ? static_cast<double>(kv.prefix_hit_tokens) / kv.prefix_query_tokens : 0.0;
  }
};

}  // namespace tessera::engine
