// W4A16 kernels. Decode is bound by memory bandwidth, so the GEMV streams the
// packed weights once with 128-bit loads (32 weights a thread a load, rows
// K-contiguous so a warp reads 512 contiguous bytes) and dequantizes in
// registers:
//   - a 4-bit value becomes a float with one mask-or, no int->float convert:
//     (word & 0x000F0000) | 0x43000000 is the float 128 + q, and a nibble at
//     bits 12..15 gives 128 + q / 16. One shift brings an odd nibble to bit 16
//     and the even one before it to bit 12, so 8 weights cost 4 shifts and 8
//     mask-ors (the integer pipe has half the lanes of the float pipe).
//   - the offsets and the zero point come out per group, not per weight:
//     Σ x·(q - z)·s = s·(A_odd + 16·A_even - 128·X_odd - 2048·X_even - z·X)
//     with A the dot products of x with the 128-offset values and X the sums
//     of x (odd/even inputs), which are shared by every row a thread handles.
//   - each thread handles R output rows (8 at batch 1) for one 32-input chunk
//     at a time, so an activation chunk read from L1 serves R weight loads.
// A block of W warps shares R rows and splits the K chunks (W picked so that
// K / 32 splits evenly); partial sums meet in shared memory. f32 accumulation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/w4a16.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kMaxWarps = 8;

// Eight consecutive activations as f32 (16 bytes of 16-bit values, 32 of f32).
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void load8(const __half* p, float (&v)[8]) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h = *reinterpret_cast<const __half2*>(&words[i]);
    float2 f = __half22float2(h);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[8]) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bf16 is the top half of an f32
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}

// The 128-offset floats of word `w`'s nibbles: odd[p] = 128 + q[2p+1],
// even[p] = 128 + q[2p] / 16.
__device__ __forceinline__ void decode_word(uint32_t w, float (&odd)[4], float (&even)[4]) {
  const uint32_t shifted[4] = {w << 12, w << 4, w >> 4, w >> 12};
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    odd[p] = __uint_as_float((shifted[p] & 0x000F0000u) | 0x43000000u);
    even[p] = __uint_as_float((shifted[p] & 0x0000F000u) | 0x43000000u);
  }
}

template <typename T, int MT, int R>
__global__ void __launch_bounds__(kMaxWarps * 32) w4a16_gemv_kernel(const T* __restrict__ x,
                                                                    const uint4* __restrict__ qweight,
                                                                    const __half* __restrict__ scales,
                                                                    const uint8_t* __restrict__ zeros,
                                                                    const T* __restrict__ bias, int m, int n, int k,
                                                                    int group_size, T* __restrict__ out,
                                                                    bool accumulate) {
  wait_for_previous_kernel();
  const int row0 = blockIdx.x * R;
  const int chunks = k / 32, groups = k / group_size;
  float acc[R][MT];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int i = 0; i < MT; ++i) acc[r][i] = 0.0f;
  }
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    // Every weight load of the chunk first, so R * 16 bytes are in flight.
    uint4 words[R];
    float scale[R], zero[R];
    const int g = (c * 32) / group_size;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = min(row0 + r, n - 1);  // rows past n repeat the last; never written
      words[r] = __ldg(qweight + int64_t(row) * chunks + c);
      scale[r] = __half2float(scales[int64_t(row) * groups + g]);
      zero[r] = static_cast<float>(zeros[int64_t(row) * groups + g]);
    }
    float a_odd[R][MT], a_even[R][MT], x_odd[MT], x_even[MT];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      x_odd[i] = x_even[i] = 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) a_odd[r][i] = a_even[r][i] = 0.0f;
    }
#pragma unroll
    for (int word = 0; word < 4; ++word) {
      float odd[R][4], even[R][4];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t w = word == 0 ? words[r].x : word == 1 ? words[r].y : word == 2 ? words[r].z : words[r].w;
        decode_word(w, odd[r], even[r]);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        if (i >= m) break;
        float v[8];
        load8(x + int64_t(i) * k + c * 32 + word * 8, v);
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          x_even[i] += v[2 * p];
          x_odd[i] += v[2 * p + 1];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            a_even[r][i] = fmaf(v[2 * p], even[r][p], a_even[r][i]);
            a_odd[r][i] = fmaf(v[2 * p + 1], odd[r][p], a_odd[r][i]);
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const float offsets = 128.0f * x_odd[i] + 2048.0f * x_even[i];
      const float sum = x_odd[i] + x_even[i];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float dot = a_odd[r][i] + 16.0f * a_even[r][i] - offsets;  // Σ x·q
        acc[r][i] = fmaf(scale[r], dot - zero[r] * sum, acc[r][i]);
      }
    }
  }
  // Sum over the block: warps by shuffles, then across warps in shared memory.
  __shared__ float partial[kMaxWarps][R * MT];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const float v = warp_sum(acc[r][i]);
      if (lane == 0) partial[warp][r * MT + i] = v;
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < R * MT; t += blockDim.x) {
    const int r = t / MT, i = t % MT, row = row0 + r;
    if (i >= m || row >= n) continue;
    float v = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) v += partial[w][t];
    if (bias != nullptr) v += to_float(bias[row]);
    if (accumulate) v += to_float(out[int64_t(i) * n + row]);
    out[int64_t(i) * n + row] = from_float<T>(v);
  }
}

// Warps per block: 4 to 8, the count that splits the K chunks most evenly.
int warps_for(int chunks) {
  int best = 4, best_waste = 1 << 30;
  for (int w = 4; w <= kMaxWarps; ++w) {
    const int threads = 32 * w, waste = (chunks + threads - 1) / threads * threads - chunks;
    if (waste < best_waste) best = w, best_waste = waste;
  }
  return best;
}

template <typename T, int MT>
void launch_rows(const T* x, const uint32_t* qweight, const __half* scales, const uint8_t* zeros, const T* bias, int m,
                 int n, int k, int g, T* out, cudaStream_t stream, bool accumulate) {
  constexpr int R = MT >= 8 ? 1 : 8 / MT;  // weight rows per thread: activations reused R times
  const int blocks = (n + R - 1) / R;
  launch_after(w4a16_gemv_kernel<T, MT, R>, blocks, 32 * warps_for(k / 32), 0, stream,
      x, reinterpret_cast<const uint4*>(qweight), scales, zeros, bias, m, n, k, g, out, accumulate);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

// One thread per packed word: its 8 weights leave in one 16-byte store (two
// for f32), so the warp writes whole contiguous lines.
template <typename T>
__global__ void w4_dequantize_kernel(const uint32_t* qweight, const __half* scales, const uint8_t* zeros, int64_t n,
                                     int64_t k, int64_t group_size, T* w) {
  struct alignas(32) Eight {
    T v[8];
  };
  const int64_t words = n * (k / 8);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / (k / 8), first = (i % (k / 8)) * 8;
    const int64_t group = row * (k / group_size) + first / group_size;
    const float scale = __half2float(scales[group]), zero = static_cast<float>(zeros[group]);
    const uint32_t word = qweight[i];
    Eight out;
#pragma unroll
    for (int j = 0; j < 8; ++j) out.v[j] = from_float<T>((static_cast<float>((word >> (4 * j)) & 0xF) - zero) * scale);
    if constexpr (sizeof(T) == 2) {
      *reinterpret_cast<uint4*>(w + row * k + first) = *reinterpret_cast<const uint4*>(out.v);
    } else {
      reinterpret_cast<float4*>(w + row * k + first)[0] = *reinterpret_cast<const float4*>(out.v);
      reinterpret_cast<float4*>(w + row * k + first)[1] = *reinterpret_cast<const float4*>(out.v + 4);
    }
  }
}

}  // namespace

template <typename T>
void launch_w4a16_gemv(const T* x, const uint32_t* qweight, const __half* scales, const uint8_t* zeros, const T* bias,
                       int64_t m, int64_t n, int64_t k, int64_t group_size, T* out, cudaStream_t stream,
                       bool accumulate) {
  if (m <= 0 || n <= 0) return;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k), g = static_cast<int>(group_size);
  if (m == 1) return launch_rows<T, 1>(x, qweight, scales, zeros, bias, im, in, ik, g, out, stream, accumulate);
  if (m == 2) return launch_rows<T, 2>(x, qweight, scales, zeros, bias, im, in, ik, g, out, stream, accumulate);
  if (m <= 4) return launch_rows<T, 4>(x, qweight, scales, zeros, bias, im, in, ik, g, out, stream, accumulate);
  if (m <= 8) return launch_rows<T, 8>(x, qweight, scales, zeros, bias, im, in, ik, g, out, stream, accumulate);
  return launch_rows<T, 16>(x, qweight, scales, zeros, bias, im, in, ik, g, out, stream, accumulate);
}

template <typename T>
void launch_w4_dequantize(const uint32_t* qweight, const __half* scales, const uint8_t* zeros, int64_t n, int64_t k,
                          int64_t group_size, T* w, cudaStream_t stream) {
  const int64_t words = n * (k / 8);
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((words + threads - 1) / threads, 65535 * 16);
  w4_dequantize_kernel<T><<<static_cast<int>(blocks), threads, 0, stream>>>(qweight, scales, zeros, n, k, group_size, w);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

#define INSTANTIATE(T)                                                                                              \
  template void launch_w4a16_gemv<T>(const T*, const uint32_t*, const __half*, const uint8_t*, const T*, int64_t, \
                                     int64_t, int64_t, int64_t, T*, cudaStream_t, bool);                          \
  template void launch_w4_dequantize<T>(const uint32_t*, const __half*, const uint8_t*, int64_t, int64_t, int64_t, \
                                        T*, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
