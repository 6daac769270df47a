// RoPE fused with the write into the paged KV cache: each thread takes V
// consecutive rotation pairs of a head, or V value elements, of one new token
// (V elements a 16-byte access where the head allows it), the token's work cut
// into blocks of kThreads along grid.y, so a decode step of one token still
// spreads over many SMs and every thread waits for memory once. Rotating k and
// storing it in the cache in the same pass saves a round trip of k through
// memory. One element a thread, a 4,096-token prefill spent about 100 us a
// layer here at a third of the copy rate (BENCHMARKS.md).
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"

namespace tessera::backend::cuda {

namespace {

// V elements moved as one access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Lanes {
  T at[V];
};

// qkv: [n, (heads + 2 kv_heads) head_dim]; caches: [blocks, kv_heads, block_size, head_dim].
// V divides head_dim / 2.
template <typename T, int V>
__global__ void rope_cache_kernel(T* qkv, const int32_t* positions, const int32_t* token_seq, const float* inv_freq,
                                  float scaling, const int32_t* block_tables, int32_t max_blocks_per_seq,
                                  int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block_size, T* k_cache,
                                  T* v_cache, bool early) {
  using L = Lanes<T, V>;
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

  const int64_t pair_lanes = (heads + kv_heads) * half / V;
  const int64_t index = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  // Rotate q and k heads: pairs (i, i + half) of each head, i = i0 .. i0 + V - 1.
  if (index < pair_lanes) {
    const int64_t head = index / (half / V), i0 = index % (half / V) * V;
    T* h = row + head * head_dim;
    const L x1 = *reinterpret_cast<const L*>(h + i0), x2 = *reinterpret_cast<const L*>(h + i0 + half);
    L r1, r2;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      // f32 angle, as the CPU twin and transformers compute it.
      const float angle = static_cast<float>(position) * freq[i0 + j];
      float s, c;
      sincosf(angle, &s, &c);
      c *= scaling;
      s *= scaling;
      const float a = to_float(x1.at[j]), b = to_float(x2.at[j]);
      r1.at[j] = from_float<T>(a * c - b * s);
      r2.at[j] = from_float<T>(b * c + a * s);
    }
    *reinterpret_cast<L*>(h + i0) = r1;
    *reinterpret_cast<L*>(h + i0 + half) = r2;
    if (head >= heads && k_cache != nullptr) {  // a key head: store the rotated pairs in the cache
      const int64_t kv = head - heads;
      T* k = k_cache + ((block * kv_heads + kv) * block_size + slot_row) * head_dim;
      *reinterpret_cast<L*>(k + i0) = r1;
      *reinterpret_cast<L*>(k + i0 + half) = r2;
    }
  } else if (v_cache != nullptr && index < pair_lanes + kv_heads * head_dim / V) {  // values go to the cache unrotated
    const int64_t e = (index - pair_lanes) * V;
    const int64_t kv = e / head_dim, d = e % head_dim;
    *reinterpret_cast<L*>(v_cache + ((block * kv_heads + kv) * block_size + slot_row) * head_dim + d) =
        *reinterpret_cast<const L*>(row + (heads + kv_heads + kv) * head_dim + d);
  }
}

template <typename T, int V>
void launch_lanes(T* qkv, const int32_t* positions, const int32_t* token_seq, const float* inv_freq, float scaling,
                  const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n, int64_t heads, int64_t kv_heads,
                  int64_t head_dim, int64_t block_size, T* k_cache, T* v_cache, cudaStream_t stream) {
  constexpr int64_t kThreads = 128;
  const int64_t lanes = ((heads + kv_heads) * (head_dim / 2) + kv_heads * head_dim) / V;  // per token
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((lanes + kThreads - 1) / kThreads));
  launch_after(rope_cache_kernel<T, V>, grid, kThreads, 0, stream, qkv, positions, token_seq, inv_freq, scaling,
               block_tables, max_blocks_per_seq, heads, kv_heads, head_dim, block_size, k_cache, v_cache,
               early_successor_launch() && programmatic_launch_enabled());
}

}  // namespace

template <typename T>
void launch_rope_cache_write(T* qkv, const int32_t* positions, const int32_t* token_seq, const float* inv_freq,
                             float scaling, const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n,
                             int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block_size, T* k_cache,
                             T* v_cache, cudaStream_t stream) {
  if (n == 0) return;
  // The widest access of at most 16 bytes whose element count divides half a
  // head (rows, heads and cache slots then start on its boundary, given
  // buffers that do).
  constexpr int kWidest = 16 / static_cast<int>(sizeof(T));
  const int64_t half = head_dim / 2;
  auto aligned = [&](int elements) {
    const uintptr_t bytes = sizeof(T) * elements;
    return half % elements == 0 && reinterpret_cast<uintptr_t>(qkv) % bytes == 0 &&
           reinterpret_cast<uintptr_t>(k_cache) % bytes == 0 && reinterpret_cast<uintptr_t>(v_cache) % bytes == 0;
  };
  auto launch = [&](auto lanes) {
    launch_lanes<T, decltype(lanes)::value>(qkv, positions, token_seq, inv_freq, scaling, block_tables,
                                            max_blocks_per_seq, n, heads, kv_heads, head_dim, block_size, k_cache,
                                            v_cache, stream);
  };
  if (aligned(kWidest)) launch(std::integral_constant<int, kWidest>{});
  else if (aligned(2)) launch(std::integral_constant<int, 2>{});
  else launch(std::integral_constant<int, 1>{});
  TESSERA_CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                             \
  template void launch_rope_cache_write<T>(T*, const int32_t*, const int32_t*, const float*, float, const int32_t*, \
                                           int32_t, int64_t, int64_t, int64_t, int64_t, int64_t, T*, T*, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
