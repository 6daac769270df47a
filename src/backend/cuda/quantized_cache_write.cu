// The write of new tokens' k and v into a quantized paged cache
// (--quant-policy 8 or 4): one warp a row (a token's key or value in one KV
// head), each lane holding head_dim / 32 values (one for smaller heads), the
// row's min and max met by shuffles, then every lane stores its codes and
// lane 0 the (scale, zero) pair. 4-bit codes: element d is in lane d % 32,
// so each even lane takes its odd neighbour's code by a shuffle and stores
// the byte of both. The arithmetic is cpu::quantize_row's step for step (IEEE
// division, round to nearest even), so the same f32 row gets the CPU's codes.
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPerLane = 8;  // head_dim up to 256

// grid: ceil(n * kv_heads * 2 / kWarpsPerBlock) blocks; row r = (token, kv head, key or value).
template <typename T, int kBits>
__global__ void quantized_cache_write_kernel(const T* __restrict__ qkv, const int32_t* __restrict__ positions,
                                             const int32_t* __restrict__ token_seq,
                                             const int32_t* __restrict__ block_tables, int32_t max_blocks_per_seq,
                                             int64_t n, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                             int64_t block_size, QuantizedKvLayer cache) {
  constexpr float kLevels = (1 << kBits) - 1;
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= n * kv_heads * 2) return;  // the same for the whole warp
  const int lane = threadIdx.x % 32;
  const int64_t t = r / (kv_heads * 2), kv = r / 2 % kv_heads;
  const bool value = r % 2 == 1;
  const T* src = qkv + t * (heads + 2 * kv_heads) * head_dim + ((value ? heads + kv_heads : heads) + kv) * head_dim;

  float x[kMaxPerLane];
  float low = FLT_MAX, high = -FLT_MAX;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    x[j] = d < head_dim ? to_float(src[d]) : 0.0f;
    if (d < head_dim) {
      low = fminf(low, x[j]);
      high = fmaxf(high, x[j]);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    low = fminf(low, __shfl_xor_sync(0xffffffffu, low, offset));
    high = fmaxf(high, __shfl_xor_sync(0xffffffffu, high, offset));
  }
  const float zero = low, scale = __fdiv_rn(__fsub_rn(high, low), kLevels);

  const int32_t position = positions[t];
  const int64_t block = block_tables[int64_t(token_seq[t]) * max_blocks_per_seq + position / block_size];
  const int64_t row = (block * kv_heads + kv) * block_size + position % block_size;
  uint8_t* codes = (value ? cache.v_codes : cache.k_codes) + row * head_dim * kBits / 8;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    if (32 * j >= head_dim) break;  // the same for the whole warp: every lane shuffles
    const float code = scale > 0.0f ? rintf(__fdiv_rn(__fsub_rn(x[j], zero), scale)) : 0.0f;
    const auto c = static_cast<uint32_t>(fminf(fmaxf(code, 0.0f), kLevels));
    if constexpr (kBits == 8) {
      if (d < head_dim) codes[d] = static_cast<uint8_t>(c);
    } else {
      const uint32_t odd = __shfl_down_sync(0xffffffffu, c, 1);
      if (d < head_dim && d % 2 == 0) codes[d / 2] = static_cast<uint8_t>(c | odd << 4);
    }
  }
  if (lane == 0) (value ? cache.v_params : cache.k_params)[row] = make_float2(scale, zero);
}

}  // namespace

template <typename T>
void launch_quantized_cache_write(const T* qkv, const int32_t* positions, const int32_t* token_seq,
                                  const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n, int64_t heads,
                                  int64_t kv_heads, int64_t head_dim, int64_t block_size,
                                  const QuantizedKvLayer& cache, cudaStream_t stream) {
  if (n == 0) return;
  if (head_dim > 32 * kMaxPerLane || head_dim % 2 != 0 || (cache.bits != 8 && cache.bits != 4)) {
    throw Error(ErrorKind::kUnsupported,
                "the " + std::to_string(cache.bits) + "-bit KV cache has no CUDA kernel for head_dim " +
                    std::to_string(head_dim),
                "use --quant-policy 0 for this model");
  }
  const int64_t rows = n * kv_heads * 2;
  const auto blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  auto launch = [&](auto kernel) {
    kernel<<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(qkv, positions, token_seq, block_tables, max_blocks_per_seq,
                                                       n, heads, kv_heads, head_dim, block_size, cache);
  };
  if (cache.bits == 8) {
    launch(quantized_cache_write_kernel<T, 8>);
  } else {
    launch(quantized_cache_write_kernel<T, 4>);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                        \
  template void launch_quantized_cache_write<T>(const T*, const int32_t*, const int32_t*, const int32_t*, int32_t, \
                                                int64_t, int64_t, int64_t, int64_t, int64_t,                      \
                                                const QuantizedKvLayer&, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
