// 4-bit weight, 16-bit activation linear layers (AWQ): launchers of plain
// pointers, the weight in backend/quantized_weight.h's canonical layout
//   qweight u32 [n, k / 8] (inputs 8w + i in bits 4i .. 4i + 3), scales f16
//   [n, k / g], zeros u8 [n, k / g]; W[o][i] = (q - zero) * scale
// T is the activation type (float, __half, __nv_bfloat16); arithmetic is f32.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::backend::cuda {

// Rows of x up to which the GEMV kernel runs (it reads the weights once for
// every row); more rows dequantize into a 16-bit scratch for cuBLASLt.
inline constexpr int64_t kW4GemvMaxRows = 16;

// out [m, n] = x [m, k] · Wᵀ (+ bias [n], may be null); m <= kW4GemvMaxRows,
// k % 32 == 0, g % 32 == 0, x 16-byte aligned.
template <typename T>
void launch_w4a16_gemv(const T* x, const uint32_t* qweight, const __half* scales, const uint8_t* zeros, const T* bias,
                       int64_t m, int64_t n, int64_t k, int64_t group_size, T* out, cudaStream_t stream);

// w [n, k] = W in T (for cuBLASLt at larger m).
template <typename T>
void launch_w4_dequantize(const uint32_t* qweight, const __half* scales, const uint8_t* zeros, int64_t n, int64_t k,
                          int64_t group_size, T* w, cudaStream_t stream);

}  // namespace tessera::backend::cuda
