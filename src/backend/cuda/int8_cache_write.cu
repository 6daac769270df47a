// The write of new tokens' k and v into an 8-bit paged cache (--quant-policy 8):
// one warp a row (a token's key or value in one KV head), each lane holding
// head_dim / 32 values (one for smaller heads), the row's min and max met by
// shuffles, then every lane stores its codes and lane 0 the (scale, zero)
// pair. The arithmetic is cpu::quantize_row_int8's step for step (IEEE
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
template <typename T>
__global__ void int8_cache_write_kernel(const T* __restrict__ qkv, const int32_t* __restrict__ positions,
                                        const int32_t* __restrict__ token_seq,
                                        const int32_t* __restrict__ block_tables, int32_t max_blocks_per_seq,
                                        int64_t n, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                        int64_t block_size, Int8KvLayer cache) {
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
  const float zero = low, scale = __fdiv_rn(__fsub_rn(high, low), 255.0f);

  const int32_t position = positions[t];
  const int64_t block = block_tables[int64_t(token_seq[t]) * max_blocks_per_seq + position / block_size];
  const int64_t row = (block * kv_heads + kv) * block_size + position % block_size;
  uint8_t* codes = (value ? cache.v_codes : cache.k_codes) + row * head_dim;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    if (d >= head_dim) break;
    const float code = scale > 0.0f ? rintf(__fdiv_rn(__fsub_rn(x[j], zero), scale)) : 0.0f;
    codes[d] = static_cast<uint8_t>(fminf(fmaxf(code, 0.0f), 255.0f));
  }
  if (lane == 0) (value ? cache.v_params : cache.k_params)[row] = make_float2(scale, zero);
}

}  // namespace

template <typename T>
void launch_int8_cache_write(const T* qkv, const int32_t* positions, const int32_t* token_seq,
                             const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n, int64_t heads,
                             int64_t kv_heads, int64_t head_dim, int64_t block_size, const Int8KvLayer& cache,
                             cudaStream_t stream) {
  if (n == 0) return;
  if (head_dim > 32 * kMaxPerLane) {
    throw Error(ErrorKind::kUnsupported, "the 8-bit KV cache has no CUDA kernel for head_dim " + std::to_string(head_dim),
                "use --quant-policy 0 for this model");
  }
  const int64_t rows = n * kv_heads * 2;
  const auto blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  int8_cache_write_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(
      qkv, positions, token_seq, block_tables, max_blocks_per_seq, n, heads, kv_heads, head_dim, block_size, cache);
  TESSERA_CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                           \
  template void launch_int8_cache_write<T>(const T*, const int32_t*, const int32_t*, const int32_t*, int32_t,     \
                                           int64_t, int64_t, int64_t, int64_t, int64_t, const Int8KvLayer&,       \
                                           cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
