// Prefill attention on Hopper through FlashInfer's sm_90a paged kernel
// (flash-attention-3 style: warp-specialised producer/consumer warp groups,
// wgmma, K/V pages gathered into shared memory by the producer). Our own
// tensor-core kernel (attention_prefill_mma.cu) is built on mma.sync, the
// Ampere instruction, and reaches about a quarter of the H200's bf16 matmul
// rate on a 4,096-token causal prefill; a wgmma kernel is a project of its
// own, and FlashInfer's is well kept and header-only, so it is used where it
// runs and measured faster (BENCHMARKS.md). This file is compiled for
// sm_90a alone (its instructions exist on compute capability 9.0 only) and
// only when the build's architectures include 90 and the FlashInfer headers
// were found (TESSERA_WITH_FLASHINFER).
//
// Our cache is [block][kv_head][token][head_dim], which FlashInfer's page
// strides describe directly (page stride, head stride, token stride), and our
// block tables [num_seqs][max_blocks_per_seq] are its page indices with
// kv_indptr[s] = s · max_blocks_per_seq. q is read in place from the qkv rows
// (already rotated by RoPE), the output written as [token][head][head_dim].
#include <cutlass/numeric_types.h>

#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/mask.cuh>

#include <cmath>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/prefill_sm90.h"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

using Bf16 = cutlass::bfloat16_t;
using PagedParams = flashinfer::BatchPrefillPagedParams<Bf16, Bf16, Bf16, int32_t>;

template <int kHeadDim>
cudaError_t run(PagedParams& params, cudaStream_t stream) {
  // Causal, no sliding window, a schedule per head (the plan lists every
  // (head, query tile)), no logits soft cap.
  return flashinfer::BatchPrefillWithPagedKVCacheDispatched<kHeadDim, kHeadDim, flashinfer::MaskMode::kCausal,
                                                            /*LEFT_SLIDING_WINDOW=*/false,
                                                            /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                            flashinfer::DefaultAttention<false>>(
      params, /*enable_pdl=*/false, stream);
}

}  // namespace

void launch_prefill_attention_sm90(const __nv_bfloat16* qkv, const Sm90PrefillDevicePlan& plan, int64_t num_tokens,
                                   const int32_t* block_tables, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                   int64_t block_size, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                                   __nv_bfloat16* out, cudaStream_t stream) {
  if (head_dim != kSm90PrefillHeadDim) {
    throw Error(ErrorKind::kInternal, "sm_90 prefill attention: no kernel for head_dim " + std::to_string(head_dim));
  }
  PagedParams params{};
  params.q_ptr = reinterpret_cast<Bf16*>(const_cast<__nv_bfloat16*>(qkv));
  params.k_ptr = reinterpret_cast<Bf16*>(const_cast<__nv_bfloat16*>(k_cache));
  params.v_ptr = reinterpret_cast<Bf16*>(const_cast<__nv_bfloat16*>(v_cache));
  params.o_ptr = reinterpret_cast<Bf16*>(out);
  params.lse_ptr = nullptr;
  params.qo_tile_indices = const_cast<int32_t*>(plan.qo_tile_indices);
  params.qo_indptr = const_cast<int32_t*>(plan.qo_indptr);
  params.kv_indptr = const_cast<int32_t*>(plan.kv_indptr);
  params.kv_indices = const_cast<int32_t*>(block_tables);
  params.qo_lens = const_cast<int32_t*>(plan.qo_lens);
  params.kv_lens = const_cast<int32_t*>(plan.kv_lens);
  params.head_indices = const_cast<int32_t*>(plan.head_indices);
  params.work_indptr = const_cast<int32_t*>(plan.work_indptr);
  params.batch_indices = const_cast<int32_t*>(plan.batch_indices);
  params.additional_params.logits_soft_cap = 0.0f;
  params.additional_params.sm_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  params.additional_params.maybe_prefix_len_ptr = nullptr;
  params.additional_params.maybe_token_pos_in_items_ptr = nullptr;
  params.additional_params.token_pos_in_items_len = 0;
  params.additional_params.maybe_max_item_len_ptr = nullptr;
  // q and out: [token][head][head_dim], q inside the qkv rows.
  params.q_stride_n = (heads + 2 * kv_heads) * head_dim;
  params.q_stride_h = head_dim;
  params.o_stride_n = heads * head_dim;
  params.o_stride_h = head_dim;
  // The cache: [block][kv_head][token][head_dim].
  params.k_stride_n = params.v_stride_n = head_dim;
  params.k_stride_h = params.v_stride_h = block_size * head_dim;
  params.k_page_stride = params.v_page_stride = kv_heads * block_size * head_dim;
  params.nnz_qo = num_tokens;
  params.num_qo_heads = static_cast<int>(heads);
  params.num_kv_heads = static_cast<int>(kv_heads);
  params.group_size = static_cast<int>(heads / kv_heads);
  params.page_size = static_cast<int>(block_size);
  params.window_left = -1;
  params.causal = true;
  TESSERA_CUDA_CHECK(run<kSm90PrefillHeadDim>(params, stream));
}

}  // namespace tessera::backend::cuda
