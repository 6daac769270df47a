// Paged causal GQA attention for prefill chunks: tiles of queries share K/V.
//
// Design: one thread block per (query tile, query head). A query tile is up to
// 64 consecutive new tokens of one sequence (prepare() cuts them on the host).
// Each query is owned by HD/64 threads (1 for head_dim <= 64), each holding a
// slice of q and of the output accumulator in registers. The block walks the
// keys the tile can see in tiles of kTile positions, staging K and V rows from
// the paged cache into shared memory once for all 64 queries (the decode
// kernel re-reads them per query), and runs an online softmax per query in
// f32, rescaling the accumulator only when the running maximum grows.
// Scalar FMA: the kernel for f32, for head dims other than 64 and 128 and for
// images older than compute_80 (with C = uint8_t or Nibbles over 8- or 4-bit
// caches too, each row dequantized with its scale and zero as it is staged;
// kv_codes.cuh); elsewhere the
// launcher hands the work to the tensor-core twin (attention_prefill_mma.cu),
// which this kernel and the CPU twin judge.
#include <cmath>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_codes.cuh"
#include "backend/cuda/prefill_kernel_choice.h"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kQueriesPerTile = 64;

// Elements at..at+3 of cache row `row` as f32: T values, or codes times the
// row's scale plus its zero (cpu::dequantize_row's fmaf).
template <typename C>
__device__ __forceinline__ float4 load_four(const C* cache, const float2* params, int64_t row, int64_t at) {
  if constexpr (sizeof(C) == 1) {
    const float2 p = params[row];
    float c[4];
    if constexpr (std::is_same_v<C, Nibbles>) {
      const uint32_t codes = *static_cast<const uint16_t*>(element_address(cache, at));  // at: a multiple of 4
#pragma unroll
      for (int i = 0; i < 4; ++i) c[i] = code_at(codes, i);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) c[i] = cache[at + i];
    }
    return make_float4(fmaf(c[0], p.x, p.y), fmaf(c[1], p.x, p.y), fmaf(c[2], p.x, p.y), fmaf(c[3], p.x, p.y));
  } else {
    return make_float4(to_float(cache[at]), to_float(cache[at + 1]), to_float(cache[at + 2]),
                       to_float(cache[at + 3]));
  }
}

// C: the cache's element type (T, or uint8_t or Nibbles codes with k_params/v_params).
template <typename T, typename C, int kHeadDim>
__global__ void prefill_attention_kernel(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                                         const int32_t* tile_first, const int32_t* tile_count,
                                         const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t heads,
                                         int64_t kv_heads, int64_t block_size, int64_t window, const C* k_cache,
                                         const C* v_cache, const float2* k_params, const float2* v_params, T* out) {
  constexpr int kSplit = kHeadDim > 64 ? kHeadDim / 64 : 1;  // threads per query
  constexpr int kDims = kHeadDim / kSplit;                    // dimensions per thread
  constexpr int kVecs = kDims >= 4 ? kDims / 4 : 1;           // float4 slices per thread
  constexpr int kTile = 4096 / kHeadDim < 64 ? 4096 / kHeadDim : 64;  // keys per shared tile (32 KiB of K+V)
  constexpr int kThreads = kQueriesPerTile * kSplit;
  static_assert(kHeadDim % 4 == 0, "rows are staged as float4");
  // float4 rows: all threads of a warp read the same one or two rows (a
  // broadcast), so one 16-byte load feeds four FMAs instead of one.
  __shared__ float4 k_tile[kTile][kHeadDim / 4];
  __shared__ float4 v_tile[kTile][kHeadDim / 4];

  const int64_t tile = blockIdx.x, head = blockIdx.y;
  const int64_t kv = head / (heads / kv_heads);
  const int64_t qkv_size = (heads + 2 * kv_heads) * kHeadDim;
  const int32_t seq = tile_seq[tile], first = tile_first[tile], count = tile_count[tile];
  const int32_t* table = block_tables + int64_t(seq) * max_blocks_per_seq;
  const int query = threadIdx.x / kSplit, part = threadIdx.x % kSplit;
  const bool active = query < count;
  const int64_t t = first + (active ? query : 0);
  const int32_t position = positions[t];
  // Positions of a tile are consecutive: the first and last bound every key any query needs.
  const int32_t tile_last = positions[first + count - 1];
  const int32_t tile_low = window > 0 ? max(0, static_cast<int32_t>(positions[first] - window + 1)) : 0;
  const float scale = rsqrtf(static_cast<float>(kHeadDim));
  const int vec_base = part * kVecs;

  float4 q[kVecs], acc[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    const T* source = qkv + t * qkv_size + head * kHeadDim + (vec_base + v) * 4;
    q[v] = active ? make_float4(to_float(source[0]) * scale, to_float(source[1]) * scale,
                                to_float(source[2]) * scale, to_float(source[3]) * scale)
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    acc[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float m = -INFINITY, l = 0.0f;

  for (int32_t k0 = tile_low; k0 <= tile_last; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    for (int index = threadIdx.x; index < kTile * (kHeadDim / 4); index += kThreads) {
      const int j = index / (kHeadDim / 4), v = index % (kHeadDim / 4);
      const int32_t p = k0 + j;
      float4 k_value = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v_value = k_value;
      if (p <= tile_last) {
        const int64_t row = (int64_t(table[p / block_size]) * kv_heads + kv) * block_size + p % block_size;
        k_value = load_four(k_cache, k_params, row, row * kHeadDim + v * 4);
        v_value = load_four(v_cache, v_params, row, row * kHeadDim + v * 4);
      }
      k_tile[j][v] = k_value;
      v_tile[j][v] = v_value;
    }
    __syncthreads();
    for (int j = 0; j < kTile; ++j) {
      const int32_t p = k0 + j;
      float dot = 0.0f;
      for (int v = 0; v < kVecs; ++v) {
        const float4 k = k_tile[j][vec_base + v];
        dot += q[v].x * k.x + q[v].y * k.y + q[v].z * k.z + q[v].w * k.w;
      }
      for (int offset = 1; offset < kSplit; offset <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      const bool visible = active && p <= position && (window <= 0 || p > position - window);
      if (!visible) continue;
      if (dot > m) {  // a new maximum: rescale what was summed so far (rare after the first keys)
        const float correction = __expf(m - dot);
        l *= correction;
        for (int v = 0; v < kVecs; ++v) {
          acc[v].x *= correction;
          acc[v].y *= correction;
          acc[v].z *= correction;
          acc[v].w *= correction;
        }
        m = dot;
      }
      const float weight = __expf(dot - m);
      l += weight;
      for (int v = 0; v < kVecs; ++v) {
        const float4 value = v_tile[j][vec_base + v];
        acc[v].x += weight * value.x;
        acc[v].y += weight * value.y;
        acc[v].z += weight * value.z;
        acc[v].w += weight * value.w;
      }
    }
  }
  if (active) {
    T* o = out + (t * heads + head) * kHeadDim;
    const float inv_l = 1.0f / l;
    for (int v = 0; v < kVecs; ++v) {
      o[(vec_base + v) * 4 + 0] = from_float<T>(acc[v].x * inv_l);
      o[(vec_base + v) * 4 + 1] = from_float<T>(acc[v].y * inv_l);
      o[(vec_base + v) * 4 + 2] = from_float<T>(acc[v].z * inv_l);
      o[(vec_base + v) * 4 + 3] = from_float<T>(acc[v].w * inv_l);
    }
  }
}

// The scalar kernel for head_dim over a cache of C.
template <typename T, typename C>
void launch_scalar(const T* qkv, const int32_t* positions, const int32_t* tile_seq, const int32_t* tile_first,
                   const int32_t* tile_count, int64_t num_tiles, const int32_t* block_tables,
                   int32_t max_blocks_per_seq, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block_size,
                   int64_t window, const C* k_cache, const C* v_cache, const float2* k_params,
                   const float2* v_params, T* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(heads));
#define TESSERA_PREFILL_CASE(D)                                                                                   \
  case D:                                                                                                         \
    prefill_attention_kernel<T, C, D><<<grid, kQueriesPerTile * (D > 64 ? D / 64 : 1), 0, stream>>>(              \
        qkv, positions, tile_seq, tile_first, tile_count, block_tables, max_blocks_per_seq, heads, kv_heads,       \
        block_size, window, k_cache, v_cache, k_params, v_params, out);                                           \
    break;
  switch (head_dim) {
    TESSERA_PREFILL_CASE(8)
    TESSERA_PREFILL_CASE(16)
    TESSERA_PREFILL_CASE(32)
    TESSERA_PREFILL_CASE(64)
    TESSERA_PREFILL_CASE(96)
    TESSERA_PREFILL_CASE(128)
    TESSERA_PREFILL_CASE(256)
    default:
      throw Error(ErrorKind::kUnsupported,
                  "CUDA prefill attention has no kernel for head_dim " + std::to_string(head_dim),
                  "supported head dims: 8, 16, 32, 64, 96, 128, 256; use --device cpu for this model");
  }
#undef TESSERA_PREFILL_CASE
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_prefill_attention(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                              const int32_t* tile_first, const int32_t* tile_count, int64_t num_tiles,
                              const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t heads,
                              int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window,
                              const T* k_cache, const T* v_cache, T* out, cudaStream_t stream) {
  if (num_tiles == 0) return;
  // The tensor-core twin where dtype, head_dim and the loaded image allow it.
  if constexpr (std::is_same_v<T, float>) {
    use_tensor_core_prefill(DType::kF32, head_dim, 0);  // logs; throws if the tensor-core kernel is forced
  } else {
    const DType dtype = std::is_same_v<T, __half> ? DType::kF16 : DType::kBF16;
    if (use_tensor_core_prefill(dtype, head_dim, prefill_attention_mma_image_arch<T>(head_dim))) {
      launch_prefill_attention_mma<T>(qkv, positions, tile_seq, tile_first, tile_count, num_tiles, block_tables,
                                      max_blocks_per_seq, heads, kv_heads, head_dim, block_size, window, k_cache,
                                      v_cache, out, stream);
      return;
    }
  }
  launch_scalar<T, T>(qkv, positions, tile_seq, tile_first, tile_count, num_tiles, block_tables, max_blocks_per_seq,
                      heads, kv_heads, head_dim, block_size, window, k_cache, v_cache, nullptr, nullptr, out, stream);
}

template <typename T>
void launch_prefill_attention_quantized(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                                        const int32_t* tile_first, const int32_t* tile_count, int64_t num_tiles,
                                        const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t heads,
                                        int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window,
                                        const QuantizedKvLayer& cache, T* out, cudaStream_t stream) {
  if (num_tiles == 0) return;
  if constexpr (!std::is_same_v<T, float>) {
    const DType dtype = std::is_same_v<T, __half> ? DType::kF16 : DType::kBF16;
    if (use_tensor_core_prefill(dtype, head_dim, prefill_attention_mma_image_arch<T>(head_dim))) {
      launch_prefill_attention_mma_quantized<T>(qkv, positions, tile_seq, tile_first, tile_count, num_tiles,
                                                block_tables, max_blocks_per_seq, heads, kv_heads, head_dim,
                                                block_size, window, cache, out, stream);
      return;
    }
  }
  with_typed_codes(cache, [&](auto* k_codes, auto* v_codes) {
    launch_scalar<T>(qkv, positions, tile_seq, tile_first, tile_count, num_tiles, block_tables, max_blocks_per_seq,
                     heads, kv_heads, head_dim, block_size, window, k_codes, v_codes, cache.k_params,
                     cache.v_params, out, stream);
  });
}

#define INSTANTIATE(T)                                                                                           \
  template void launch_prefill_attention<T>(const T*, const int32_t*, const int32_t*, const int32_t*,            \
                                            const int32_t*, int64_t, const int32_t*, int32_t, int64_t, int64_t,  \
                                            int64_t, int64_t, int64_t, const T*, const T*, T*, cudaStream_t);     \
  template void launch_prefill_attention_quantized<T>(const T*, const int32_t*, const int32_t*, const int32_t*, \
                                                      const int32_t*, int64_t, const int32_t*, int32_t, int64_t,  \
                                                      int64_t, int64_t, int64_t, int64_t, const QuantizedKvLayer&, \
                                                      T*, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
