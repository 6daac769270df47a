// The start-up memory plan: how many KV blocks the cache gets and how long a
// session can be, after the weights and the activation workspace.
//
//   cache_max_entry_count < 1: that fraction of the budget left after weights
//                              and workspace becomes KV blocks;
//   cache_max_entry_count >= 1: that many blocks (refused with kOutOfMemory when
//                              they exceed what is left).
// The plan prints one table (weights, workspace, KV blocks, tokens that fit,
// session length that fits). A session length that does not fit is truncated
// with a warning; no block at all is Error(kInvalidArgument) naming the flags
// to change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/paged_kv.h"
#include "core/dtype.h"
#include "model/model_spec.h"

namespace tessera::engine {

struct MemoryPlanInput {
  size_t memory_budget = 0;            // bytes the backend may use in all
  size_t weight_bytes = 0;
  size_t workspace_bytes = 0;          // activations of the largest step
  bool workspace_measured = false;     // by a warm-up forward (warmup.h), else estimated from the shapes
  size_t graph_bytes = 0;              // decode graphs' own memory (decode_graph_bytes), 0 without them
  size_t block_bytes = 0;              // one KV block: keys and values of every layer
  backend::KvCacheFormat kv_format = backend::KvCacheFormat::kCompute;  // named in the table
  int64_t block_size = 64;             // tokens per block (--cache-block-seq-len)
  double cache_max_entry_count = 0.8;  // --cache-max-entry-count
  int64_t session_len = 0;             // requested (--session-len)
  int64_t max_batch_size = 1;          // for the table's "sequences at full length"
};

struct MemoryPlan {
  int64_t num_blocks = 0;
  int64_t tokens_that_fit = 0;    // num_blocks * block_size
  int64_t session_len = 0;        // requested, or truncated to tokens_that_fit
  bool session_len_truncated = false;
  size_t kv_bytes = 0;
  std::string table;              // what was printed
};

// Throws Error(kInvalidArgument) when not one block fits, Error(kOutOfMemory)
// when an absolute block count exceeds the budget.
MemoryPlan plan_memory(const MemoryPlanInput& input);

// The CPU backend's inputs: weight bytes from the model's shape in `dtype`,
// a workspace estimate for a step of max_step_tokens tokens and max_batch_size
// logits rows, and the block bytes of the paged cache. With `packed` (a GPU
// backend, which keeps a 4-bit checkpoint's linears packed) an AWQ model's
// linear weights count bits / 8 bytes a weight plus 4 bytes per group and
// output (the tensor-core layout's scale-and-zero word; the canonical one
// takes 3); the CPU backend dequantizes them into `dtype`.
size_t weight_bytes(const model::ModelSpec& spec, DType dtype, bool packed = false);
// One KV block over every layer: keys and values in `dtype`, or 8- or 4-bit
// codes with an f32 scale and zero a row (backend/paged_kv.h).
size_t kv_block_bytes(const model::ModelSpec& spec, DType dtype, int64_t block_size,
                      backend::KvCacheFormat format = backend::KvCacheFormat::kCompute);
// Before the weights are read: Error(kOutOfMemory) when one rank's share of
// them (weight_bytes / tp) does not fit in what `device` has free, naming
// the sizes and what would make them fit (more tensor-parallel GPUs, a 4-bit
// export, the memory other processes hold) instead of the allocator's
// failure half-way through the load. Leaves 2 % of the free memory for the
// CUDA context's own growth.
void check_weights_fit(size_t rank_weight_bytes, size_t free_bytes, size_t total_bytes, const std::string& device,
                       int tp, bool four_bit);
size_t workspace_bytes(const model::ModelSpec& spec, DType dtype, int64_t max_step_tokens, int64_t max_batch_size);
// What CUDA graphs of decode steps (model/decode_graphs.h) of up to
// max_batch_size sequences hold beside the workspace: the logits buffer and
// the activations of the largest bucket (graphs replayed on one stream share
// their memory nodes' physical memory), and the cache's spare block (block_bytes).
size_t decode_graph_bytes(const model::ModelSpec& spec, DType dtype, int64_t max_batch_size, size_t block_bytes);
// Host memory available now (MemAvailable), the CPU backend's default budget.
size_t host_available_memory();

}  // namespace tessera::engine
