// RMSNorm, alone and fused with the residual add that precedes it in every
// decoder block: one thread block per row, the sum of squares reduced in f32
// through warp shuffles, then the row is scaled.
//
// A decode step has one row per sequence, so the kernel is bound by the
// latency of its loads, not their bytes: the vector kernel gives each thread
// kPer 16-byte vectors of the row (a 4096-wide bf16 row: 512 threads, one
// load each), keeps them in registers between the two passes, and so waits
// for memory once instead of once per element. Rows that are not whole
// 16-byte vectors, or wider than 4 vectors × 1024 threads, take the scalar
// kernel.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kScalarThreads = 256;
constexpr int kMaxThreads = 1024;
constexpr int kMaxPer = 4;

// Sum over the block (any multiple of 32 threads up to 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float partial[kMaxThreads / 32];
  __shared__ float total;
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < warps ? partial[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

template <typename T, bool kAddResidual>
__global__ void rms_norm_kernel(T* residual, const T* x, const T* weight, int64_t hidden, float eps, T* out,
                                bool early) {
  wait_for_previous_kernel();
  if (early) allow_next_kernel();
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

// 16 bytes of T.
template <typename T>
struct alignas(16) Vec {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// Thread i holds vectors i, i + blockDim, ... (kPer of them, the last ones
// possibly past the row) of its row in registers.
template <typename T, bool kAddResidual, int kPer>
__global__ void rms_norm_vec_kernel(T* residual, const T* x, const T* weight, int64_t hidden, float eps, T* out,
                                    bool early) {
  wait_for_previous_kernel();
  if (early) allow_next_kernel();
  using V = Vec<T>;
  const int64_t row = blockIdx.x;
  const int64_t vectors = hidden / V::kSize;
  V* r = reinterpret_cast<V*>(residual + row * hidden);
  const V* xr = reinterpret_cast<const V*>(x + row * hidden);
  V held[kPer];
  float sum_squares = 0.0f;
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t j = threadIdx.x + int64_t(p) * blockDim.x;
    if (j >= vectors) continue;
    held[p] = r[j];
    if (kAddResidual) {
      const V add = xr[j];
#pragma unroll
      for (int e = 0; e < V::kSize; ++e) held[p].v[e] = from_float<T>(to_float(held[p].v[e]) + to_float(add.v[e]));
      r[j] = held[p];
    }
#pragma unroll
    for (int e = 0; e < V::kSize; ++e) {
      const float v = to_float(held[p].v[e]);
      sum_squares += v * v;
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_squares) / hidden + eps);
  const V* w = reinterpret_cast<const V*>(weight);
  V* o = reinterpret_cast<V*>(out + row * hidden);
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t j = threadIdx.x + int64_t(p) * blockDim.x;
    if (j >= vectors) continue;
    const V wv = w[j];
    V result;
#pragma unroll
    for (int e = 0; e < V::kSize; ++e) result.v[e] = from_float<T>(to_float(held[p].v[e]) * inv_rms * to_float(wv.v[e]));
    o[j] = result;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, bool kAddResidual>
void launch(T* residual, const T* x, const T* weight, int64_t n, int64_t hidden, float eps, T* out,
            cudaStream_t stream) {
  constexpr int64_t kVec = 16 / sizeof(T);
  const int64_t vectors = hidden / kVec;
  const bool vector_path = hidden % kVec == 0 && vectors <= int64_t{kMaxPer} * kMaxThreads && aligned16(residual) &&
                           aligned16(weight) && aligned16(out) && (!kAddResidual || aligned16(x));
  // Few blocks at decode sizes: the next kernel (a GEMV) launches beside
  // them and has its first weight loads in flight while the norm runs.
  const bool early = early_successor_launch() && programmatic_launch_enabled();
  if (!vector_path) {
    launch_after(rms_norm_kernel<T, kAddResidual>, static_cast<unsigned>(n), kScalarThreads, 0, stream, residual, x,
                 weight, hidden, eps, out, early);
    TESSERA_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t per = (vectors + kMaxThreads - 1) / kMaxThreads;                 // 1 .. kMaxPer
  const int64_t threads = ((vectors + per - 1) / per + 31) / 32 * 32;            // a whole number of warps
  const dim3 grid(static_cast<unsigned>(n)), block(static_cast<unsigned>(threads));
  auto run = [&](auto kernel) {
    launch_after(kernel, grid, block, 0, stream, residual, x, weight, hidden, eps, out, early);
  };
  switch (per) {
    case 1: run(rms_norm_vec_kernel<T, kAddResidual, 1>); break;
    case 2: run(rms_norm_vec_kernel<T, kAddResidual, 2>); break;
    case 3: run(rms_norm_vec_kernel<T, kAddResidual, 3>); break;
    default: run(rms_norm_vec_kernel<T, kAddResidual, 4>); break;
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void launch_rms_norm(const T* x, const T* weight, int64_t n, int64_t hidden, float eps, T* out, cudaStream_t stream) {
  if (n == 0) return;
  launch<T, false>(const_cast<T*>(x), nullptr, weight, n, hidden, eps, out, stream);
}

template <typename T>
void launch_add_rms_norm(T* residual, const T* x, const T* weight, int64_t n, int64_t hidden, float eps, T* out,
                         cudaStream_t stream) {
  if (n == 0) return;
  launch<T, true>(residual, x, weight, n, hidden, eps, out, stream);
}

namespace {

// RMSNorm over each q and k head (Qwen3's q_norm and k_norm), in place: one
// warp per head (head_dim 64-256 is 2-8 elements a lane), its sum of squares
// through shuffles, kHeadWarps heads a block.
constexpr int kHeadWarps = 4;

template <typename T>
__global__ void head_rms_norm_kernel(T* qkv, int64_t n, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                     const T* q_weight, const T* k_weight, float eps) {
  wait_for_previous_kernel();
  const int64_t normed = heads + kv_heads;  // q and k heads of a token
  const int64_t item = int64_t{blockIdx.x} * kHeadWarps + threadIdx.x / 32;
  if (item >= n * normed) return;
  const int64_t token = item / normed, h = item % normed;
  T* head = qkv + token * (heads + 2 * kv_heads) * head_dim + h * head_dim;
  const T* weight = h < heads ? q_weight : k_weight;
  const int lane = threadIdx.x % 32;
  float sum_squares = 0.0f;
  for (int64_t j = lane; j < head_dim; j += 32) {
    const float v = to_float(head[j]);
    sum_squares += v * v;
  }
  const float inv_rms = rsqrtf(warp_sum(sum_squares) / head_dim + eps);
  for (int64_t j = lane; j < head_dim; j += 32) {
    head[j] = from_float<T>(to_float(head[j]) * inv_rms * to_float(weight[j]));
  }
}

}  // namespace

template <typename T>
void launch_head_rms_norm(T* qkv, int64_t n, int64_t heads, int64_t kv_heads, int64_t head_dim, const T* q_weight,
                          const T* k_weight, float eps, cudaStream_t stream) {
  const int64_t items = n * (heads + kv_heads);
  if (items == 0) return;
  const unsigned blocks = static_cast<unsigned>((items + kHeadWarps - 1) / kHeadWarps);
  launch_after(head_rms_norm_kernel<T>, blocks, kHeadWarps * 32, 0, stream, qkv, n, heads, kv_heads, head_dim,
               q_weight, k_weight, eps);
  TESSERA_CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                   \
  template void launch_rms_norm<T>(const T*, const T*, int64_t, int64_t, float, T*, cudaStream_t);       \
  template void launch_add_rms_norm<T>(T*, const T*, const T*, int64_t, int64_t, float, T*, cudaStream_t); \
  template void launch_head_rms_norm<T>(T*, int64_t, int64_t, int64_t, int64_t, const T*, const T*, float,  \
                                        cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
