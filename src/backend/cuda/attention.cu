// Paged causal GQA attention, one kernel for prefill chunks and decode.
//
// Design: one thread block per (new token, query head), four warps. Each warp
// walks every fourth key position of the token's visible range with an online
// softmax (running max m, sum l, weighted value accumulator), each lane owning
// head_dim/32 dimensions so K and V rows are read coalesced; the four partial
// states are merged through shared memory at the end. Scores and accumulators
// are f32. This is the correct-first kernel: it re-reads K/V per query head
// and per query token; the flash-style prefill and split-K decode kernels that
// share K/V across a GQA group replace it where measured faster, with this one
// as their judge.
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kWarps = 4;

template <typename T, int kHeadDim>
__global__ void paged_attention_kernel(const T* qkv, const int32_t* positions, const int32_t* token_seq,
                                       const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t heads,
                                       int64_t kv_heads, int64_t block_size, int64_t window, const T* k_cache,
                                       const T* v_cache, T* out) {
  // Small heads (8, 16: tiny test models) leave lanes idle rather than need a second kernel.
  constexpr int kPerLane = kHeadDim >= 32 ? kHeadDim / 32 : 1;
  const int64_t t = blockIdx.x, head = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool lane_active = lane < kHeadDim;
  const int64_t kv = head / (heads / kv_heads);
  const int64_t qkv_size = (heads + 2 * kv_heads) * kHeadDim;
  const int32_t last = positions[t];
  const int32_t first = window > 0 ? max(0, static_cast<int32_t>(last - window + 1)) : 0;
  const int32_t* table = block_tables + int64_t(token_seq[t]) * max_blocks_per_seq;
  const float scale = rsqrtf(static_cast<float>(kHeadDim));

  float q[kPerLane], acc[kPerLane];
  for (int j = 0; j < kPerLane; ++j) {
    q[j] = lane_active ? to_float(qkv[t * qkv_size + head * kHeadDim + lane + 32 * j]) * scale : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int32_t p = first + warp; p <= last; p += kWarps) {
    const int64_t row = ((int64_t(table[p / block_size]) * kv_heads + kv) * block_size + p % block_size) * kHeadDim;
    float dot = 0.0f;
    if (lane_active) {
      for (int j = 0; j < kPerLane; ++j) dot += q[j] * to_float(k_cache[row + lane + 32 * j]);
    }
    const float s = warp_sum(dot);
    const float m_new = fmaxf(m, s);
    const float correction = __expf(m - m_new), weight = __expf(s - m_new);
    l = l * correction + weight;
    if (lane_active) {
      for (int j = 0; j < kPerLane; ++j) acc[j] = acc[j] * correction + weight * to_float(v_cache[row + lane + 32 * j]);
    }
    m = m_new;
  }

  __shared__ float warp_m[kWarps], warp_l[kWarps], warp_acc[kWarps][kHeadDim];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  if (lane_active) {
    for (int j = 0; j < kPerLane; ++j) warp_acc[warp][lane + 32 * j] = acc[j];
  }
  __syncthreads();
  float m_all = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w) l_all += warp_l[w] * __expf(warp_m[w] - m_all);
  for (int d = threadIdx.x; d < kHeadDim; d += blockDim.x) {
    float value = 0.0f;
    for (int w = 0; w < kWarps; ++w) value += warp_acc[w][d] * __expf(warp_m[w] - m_all);
    out[(t * heads + head) * kHeadDim + d] = from_float<T>(value / l_all);
  }
}

}  // namespace

template <typename T>
void launch_paged_attention(const T* qkv, const int32_t* positions, const int32_t* token_seq,
                            const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n, int64_t heads,
                            int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window, const T* k_cache,
                            const T* v_cache, T* out, cudaStream_t stream) {
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads));
#define TESSERA_ATTENTION_CASE(D)                                                                                  \
  case D:                                                                                                          \
    paged_attention_kernel<T, D><<<grid, 32 * kWarps, 0, stream>>>(qkv, positions, token_seq, block_tables,        \
                                                                   max_blocks_per_seq, heads, kv_heads, block_size, \
                                                                   window, k_cache, v_cache, out);                 \
    break;
  switch (head_dim) {
    TESSERA_ATTENTION_CASE(8)
    TESSERA_ATTENTION_CASE(16)
    TESSERA_ATTENTION_CASE(32)
    TESSERA_ATTENTION_CASE(64)
    TESSERA_ATTENTION_CASE(96)
    TESSERA_ATTENTION_CASE(128)
    TESSERA_ATTENTION_CASE(256)
    default:
      throw Error(ErrorKind::kUnsupported, "CUDA attention has no kernel for head_dim " + std::to_string(head_dim),
                  "supported head dims: 8, 16, 32, 64, 96, 128, 256; use --device cpu for this model");
  }
#undef TESSERA_ATTENTION_CASE
  TESSERA_CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                            \
  template void launch_paged_attention<T>(const T*, const int32_t*, const int32_t*, const int32_t*, int32_t,      \
                                          int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const T*, const T*, \
                                          T*, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
