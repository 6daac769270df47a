// RMSNorm, alone and fused with the residual add that precedes it in every
// decoder block: one thread block per row, the sum of squares reduced in f32
// through warp shuffles, then a second pass scales. Rows are at most a few
// thousand values, so both passes hit L1/L2.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kThreads = 256;

// Sum over the block; every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < kThreads / 32 ? partial[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

template <typename T, bool kAddResidual>
__global__ void rms_norm_kernel(T* residual, const T* x, const T* weight, int64_t hidden, float eps, T* out) {
  const int64_t row = blockIdx.x;
  T* r = residual + row * hidden;  // the input row (and, with kAddResidual, updated in place)
  const T* xr = x + row * hidden;
  float sum_squares = 0.0f;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    float v = to_float(r[j]);
    if (kAddResidual) {
      const T updated = from_float<T>(v + to_float(xr[j]));
      r[j] = updated;
      v = to_float(updated);
    }
    sum_squares += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(sum_squares) / hidden + eps);
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    out[row * hidden + j] = from_float<T>(to_float(r[j]) * inv_rms * to_float(weight[j]));
  }
}

}  // namespace

template <typename T>
void launch_rms_norm(const T* x, const T* weight, int64_t n, int64_t hidden, float eps, T* out, cudaStream_t stream) {
  if (n == 0) return;
  rms_norm_kernel<T, false><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(const_cast<T*>(x), nullptr, weight,
                                                                                hidden, eps, out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_add_rms_norm(T* residual, const T* x, const T* weight, int64_t n, int64_t hidden, float eps, T* out,
                         cudaStream_t stream) {
  if (n == 0) return;
  rms_norm_kernel<T, true><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(residual, x, weight, hidden, eps, out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                   \
  template void launch_rms_norm<T>(const T*, const T*, int64_t, int64_t, float, T*, cudaStream_t);       \
  template void launch_add_rms_norm<T>(T*, const T*, const T*, int64_t, int64_t, float, T*, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
