// Memory-bound element-wise kernels: embedding gather, SiLU·mul, adds, row
// gather and the f32 conversion of logits. Grid-stride loops; one thread per
// element, which already saturates bandwidth for these shapes.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

template <typename T>
__global__ void embedding_kernel(const T* table, int64_t hidden, const int32_t* ids, int64_t n, T* out) {
  wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * hidden; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / hidden, col = i % hidden;
    out[i] = table[int64_t(ids[row]) * hidden + col];
  }
}

template <typename T>
__global__ void silu_mul_kernel(const T* gate_up, int64_t n, int64_t inter, T* out, bool early) {
  wait_for_previous_kernel();
  if (early) allow_next_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * inter; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / inter, col = i % inter;
    const float gate = to_float(gate_up[row * 2 * inter + col]);
    const float up = to_float(gate_up[row * 2 * inter + inter + col]);
    out[i] = from_float<T>(silu_times(gate, up));
  }
}

// The same with 16-byte loads and stores (8 16-bit values or 4 f32 a thread),
// where every row is whole vectors: one index division per vector, not per
// element, and whole lines per warp; at a 4,096-token prefill the scalar
// kernel moved about 1.5 TB/s.
template <typename T>
__global__ void silu_mul_vec_kernel(const uint4* gate_up, int64_t n, int64_t row_vectors, uint4* out, bool early) {
  wait_for_previous_kernel();
  if (early) allow_next_kernel();
  constexpr int kVec = 16 / sizeof(T);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * row_vectors;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / row_vectors, col = i % row_vectors;
    float gate[kVec], up[kVec];
    to_floats(gate_up[row * 2 * row_vectors + col], gate, T{});
    to_floats(gate_up[row * 2 * row_vectors + row_vectors + col], up, T{});
    union {
      uint4 vector;
      T values[kVec];
    } result;
#pragma unroll
    for (int e = 0; e < kVec; ++e) result.values[e] = from_float<T>(silu_times(gate[e], up[e]));
    out[i] = result.vector;
  }
}

template <typename T>
__global__ void add_kernel(T* x, const T* y, int64_t count) {
  wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = from_float<T>(to_float(x[i]) + to_float(y[i]));
  }
}

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t m, int64_t n) {
  wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < m * n; i += int64_t(gridDim.x) * blockDim.x) {
    y[i] = from_float<T>(to_float(y[i]) + to_float(bias[i % n]));
  }
}

template <typename T>
__global__ void gather_rows_kernel(const T* x, const int32_t* rows, int64_t count, int64_t width, T* out) {
  wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count * width; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = x[int64_t(rows[i / width]) * width + i % width];
  }
}

template <typename T>
__global__ void to_f32_kernel(const T* in, int64_t count, float* out) {
  wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = to_float(in[i]);
  }
}

}  // namespace

template <typename T>
void launch_embedding(const T* table, int64_t hidden, const int32_t* ids, int64_t n, T* out, cudaStream_t stream) {
  if (n == 0) return;
  launch_after(embedding_kernel<T>, blocks_for(n * hidden), kThreads, 0, stream, table, hidden, ids, n, out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_silu_mul(const T* gate_up, int64_t n, int64_t inter, T* out, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int64_t kVec = 16 / sizeof(T);
  const bool aligned = reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  // As rms_norm: the GEMV after it loads its first weights meanwhile.
  const bool early = early_successor_launch() && programmatic_launch_enabled();
  if (aligned && inter % kVec == 0) {
    launch_after(silu_mul_vec_kernel<T>, blocks_for(n * inter / kVec), kThreads, 0, stream,
                 reinterpret_cast<const uint4*>(gate_up), n, inter / kVec, reinterpret_cast<uint4*>(out), early);
  } else {
    launch_after(silu_mul_kernel<T>, blocks_for(n * inter), kThreads, 0, stream, gate_up, n, inter, out, early);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_add(T* x, const T* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  launch_after(add_kernel<T>, blocks_for(count), kThreads, 0, stream, x, y, count);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_add_bias(T* y, const T* bias, int64_t m, int64_t n, cudaStream_t stream) {
  if (m * n == 0) return;
  launch_after(add_bias_kernel<T>, blocks_for(m * n), kThreads, 0, stream, y, bias, m, n);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_gather_rows(const T* x, const int32_t* rows, int64_t count, int64_t width, T* out, cudaStream_t stream) {
  if (count * width == 0) return;
  launch_after(gather_rows_kernel<T>, blocks_for(count * width), kThreads, 0, stream, x, rows, count, width, out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_to_f32(const T* in, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return;
  launch_after(to_f32_kernel<T>, blocks_for(count), kThreads, 0, stream, in, count, out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                      \
  template void launch_embedding<T>(const T*, int64_t, const int32_t*, int64_t, T*, cudaStream_t);          \
  template void launch_silu_mul<T>(const T*, int64_t, int64_t, T*, cudaStream_t);                           \
  template void launch_add<T>(T*, const T*, int64_t, cudaStream_t);                                         \
  template void launch_add_bias<T>(T*, const T*, int64_t, int64_t, cudaStream_t);                           \
  template void launch_gather_rows<T>(const T*, const int32_t*, int64_t, int64_t, T*, cudaStream_t);        \
  template void launch_to_f32<T>(const T*, int64_t, float*, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
