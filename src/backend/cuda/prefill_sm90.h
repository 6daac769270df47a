// Prefill attention on Hopper through FlashInfer's sm_90a paged kernel
// (attention_prefill_sm90.cu), and the host-side work plan it runs from.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace tessera::backend::cuda {

// What the one instantiation covers: bf16, head_dim 128, causal, no sliding
// window; every other case takes our own kernels.
constexpr int64_t kSm90PrefillHeadDim = 128;
// Query rows of one work item: FlashInfer's CTA_Q for the paged head_dim-128 kernel.
constexpr int32_t kSm90PrefillQueryTile = 128;

// The persistent kernel runs one thread block per multiprocessor; block b
// takes work items [work_indptr[b], work_indptr[b + 1]) in order. An item is
// one query tile of one sequence for one query head:
//   qo_tile_indices  tile of the sequence's new tokens (rows 128·tile ...)
//   qo_indptr        the sequence's first new token in q / out
//   kv_indptr        offset of its block-table row (page indices)
//   qo_lens, kv_lens its new tokens, its cached tokens after the step
//   head_indices     the query head; batch_indices the sequence
struct Sm90PrefillPlan {
  std::vector<int32_t> work_indptr;  // [blocks + 1]
  std::vector<int32_t> qo_tile_indices, qo_indptr, kv_indptr, qo_lens, kv_lens, head_indices, batch_indices;  // [items]

  int64_t items() const { return static_cast<int64_t>(qo_tile_indices.size()); }
  // Every array in the order above, for one upload.
  std::vector<int32_t> packed() const;
};

// Spreads every (query head, query tile) of the step over `blocks` thread
// blocks, longest first, each to the block with the least work so far (the
// work of a tile: the keys its causal mask lets it read). query_start
// [seqs + 1] and positions [tokens] as AttentionBatch; a sequence's new
// tokens must be the last of its context (positions consecutive), which
// FlashInfer's causal mask (aligned to the end of the keys) assumes; throws
// Error(kInternal) otherwise.
Sm90PrefillPlan plan_sm90_prefill(const std::vector<int32_t>& query_start, const std::vector<int32_t>& positions,
                                  int32_t max_blocks_per_seq, int64_t heads, int64_t blocks);

// The plan's arrays on the device, inside one uploaded packed() buffer.
struct Sm90PrefillDevicePlan {
  const int32_t *work_indptr = nullptr, *qo_tile_indices = nullptr, *qo_indptr = nullptr, *kv_indptr = nullptr,
                *qo_lens = nullptr, *kv_lens = nullptr, *head_indices = nullptr, *batch_indices = nullptr;
};
Sm90PrefillDevicePlan sm90_device_plan(const Sm90PrefillPlan& plan, const int32_t* packed);

// True when this build holds the kernel (its architectures include 90 and the
// FlashInfer headers were found at configure time).
bool sm90_prefill_built();

// out [tokens, heads · 128] = causal attention of the q rows of qkv [tokens,
// (heads + 2 · kv_heads) · 128] over the paged cache [blocks, kv_heads,
// block_size, 128], per `plan` (uploaded for `blocks` = the device's
// multiprocessors). Compute capability 9.0 only. Throws Error(kInternal)
// without the kernel in this build.
void launch_prefill_attention_sm90(const __nv_bfloat16* qkv, const Sm90PrefillDevicePlan& plan, int64_t num_tokens,
                                   const int32_t* block_tables, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                   int64_t block_size, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                                   __nv_bfloat16* out, cudaStream_t stream);

}  // namespace tessera::backend::cuda
