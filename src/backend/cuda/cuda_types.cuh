// Conversions between storage types and f32 inside kernels, and the explicit
// instantiation list shared by every kernel file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tessera::backend::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// The values of one 16-byte load as f32: 4 floats, or 8 16-bit values (the
// last argument picks the storage type).
__device__ __forceinline__ void to_floats(const uint4& v, float* f, float) {
  const float* p = reinterpret_cast<const float*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = p[i];
}
__device__ __forceinline__ void to_floats(const uint4& v, float* f, __half) {
  const __half2* p = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __half22float2(p[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ void to_floats(const uint4& v, float* f, __nv_bfloat16) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(p[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

// silu(gate) · up as the SiLU·mul op computes it (elementwise.cu), so a
// kernel that forms it elsewhere (a 4-bit product's store) gives its bits.
__device__ __forceinline__ float silu_times(float gate, float up) { return gate / (1.0f + __expf(-gate)) * up; }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace tessera::backend::cuda

// Instantiates a launcher for every storage type: INSTANTIATE(launch_x, (args with T)).
#define TESSERA_FOR_EACH_CUDA_TYPE(MACRO) \
  MACRO(float)                            \
  MACRO(__half)                           \
  MACRO(__nv_bfloat16)
