// RoPE fused with the write into the paged KV cache: one thread per (head,
// rotation pair) and per value element of a new token, the token's work cut
// into blocks of kThreads along grid.y, so a decode step of one token still
// spreads over many SMs and every thread waits for memory once. Rotating k and
// storing it in the cache in the same pass saves a round trip of k through memory.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"

namespace tessera::backend::cuda {

namespace {

template <typename T>
__global__ void rope_cache_kernel(T* qkv, const int32_t* positions, const int32_t* token_seq, const float* inv_freq,
                                  float scaling, const int32_t* block_tables, int32_t max_blocks_per_seq,
                                  int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block_size, T* k_cache,
                                  T* v_cache, bool early) {
  wait_for_previous_kernel();
  if (early) allow_next_kernel();
  const int64_t t = blockIdx.x;
  const int64_t half = head_dim / 2;
  const int64_t qkv_size = (heads + 2 * kv_heads) * head_dim;
  const int32_t position = positions[t];
  const int32_t seq = token_seq[t];
  const float* freq = inv_freq + int64_t(seq) * half;
  T* row = qkv + t * qkv_size;
  const int64_t block = block_tables[int64_t(seq) * max_blocks_per_seq + position / block_size];
  const int64_t slot_row = position % block_size;

  const int64_t pairs = (heads + kv_heads) * half;
  const int64_t index = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  // Rotate q and k heads: pairs (i, i + half) of each head.
  if (index < pairs) {
    const int64_t head = index / half, i = index % half;
    // f32 angle, as the CPU twin and transformers compute it.
    const float angle = static_cast<float>(position) * freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    c *= scaling;
    s *= scaling;
    T* h = row + head * head_dim;
    const float x1 = to_float(h[i]), x2 = to_float(h[i + half]);
    const T r1 = from_float<T>(x1 * c - x2 * s), r2 = from_float<T>(x2 * c + x1 * s);
    h[i] = r1;
    h[i + half] = r2;
    if (head >= heads) {  // a key head: store the rotated pair in the cache
      const int64_t kv = head - heads;
      T* k = k_cache + ((block * kv_heads + kv) * block_size + slot_row) * head_dim;
      k[i] = r1;
      k[i + half] = r2;
    }
  } else if (index < pairs + kv_heads * head_dim) {  // values go to the cache unrotated
    const int64_t kv = (index - pairs) / head_dim, d = (index - pairs) % head_dim;
    v_cache[((block * kv_heads + kv) * block_size + slot_row) * head_dim + d] =
        row[(heads + kv_heads + kv) * head_dim + d];
  }
}

}  // namespace

template <typename T>
void launch_rope_cache_write(T* qkv, const int32_t* positions, const int32_t* token_seq, const float* inv_freq,
                             float scaling, const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n,
                             int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block_size, T* k_cache,
                             T* v_cache, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int64_t kThreads = 128;
  const int64_t work = (heads + kv_heads) * (head_dim / 2) + kv_heads * head_dim;  // per token
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((work + kThreads - 1) / kThreads));
  launch_after(rope_cache_kernel<T>, grid, kThreads, 0, stream, qkv, positions, token_seq, inv_freq, scaling,
                                                                      block_tables, max_blocks_per_seq, heads,
                                                                      kv_heads, head_dim, block_size, k_cache,
                                                                      v_cache,
                                                                      early_successor_launch() && programmatic_launch_enabled());
  TESSERA_CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                             \
  template void launch_rope_cache_write<T>(T*, const int32_t*, const int32_t*, const float*, float, const int32_t*, \
                                           int32_t, int64_t, int64_t, int64_t, int64_t, int64_t, T*, T*, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
