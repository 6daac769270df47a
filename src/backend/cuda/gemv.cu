// GEMV / skinny GEMM for m ≤ 16 (see gemv.h).
//
// Design: a block of four warps; warp w of block b owns output columns
// [(4b + w)·R, (4b + w)·R + R) (R = rows of w per warp). Its lanes stride over
// k in 16-byte chunks (8 elements): each iteration issues U·R streaming loads
// of w (U·R = 8, so every lane has 128 bytes in flight, what hides DRAM
// latency at one or two warps per scheduler) and, per x row, one 16-byte load
// of x that is reused for all R weight rows. x is tiny and shared by every
// warp, so it stays in L1/L2 rather than being staged through shared memory
// (which would cost a barrier per tile for no fewer L1 transactions). The
// m·R partial sums are reduced across the warp at the end.
//
// Split-k variant: the four warps of block b share its R columns [bR, bR + R)
// and stride over k together, warp w taking chunks 32w + lane + 128j, so a
// lane walks a quarter of each row; the four warps' sums meet in shared
// memory. Four times the warps on the same columns: for long k and few
// columns (the down projection, k = 14336 and 4096 columns) the per-warp
// variant has too few warps, each walking a long row, to keep an H200's
// memory busy (77 % of its copy rate at one row, against 97 % for gate_up).
//
// Fusions (GemvFusion), which save decode a kernel each around the GEMV:
//   - RMSNorm of x: rms_norm(x)·wᵀ = inv_rms(x) · ((x∘g)·wᵀ), and inv_rms is
//     a per-row scalar, so the loop multiplies x by g and, since every warp
//     reads all of x once (split-k: the block's warps a quarter each), also
//     sums x²; the scalar is applied to the sums at the end (split-k: once
//     the warps' sums of squares have met too). No extra pass over x.
//   - SiLU·mul: x is gate | up (row stride 2k); silu(gate)·up is formed in
//     f32 as the chunks are read.
//   - bias and accumulate (y += result: the residual stream) in the store.
//   - a prefetch of a later kernel's weight into L2 after the weight loop
//     (l2_prefetch.cuh), each warp one slice.
// The fused inputs are never rounded to 16 bits (the separate ops round them
// once), so the fused result is nearer the f32 reference, not further.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <fmt/format.h>

#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/gemv.h"
#include "backend/cuda/l2_prefetch.cuh"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kGemvWarps = 4;

// Σ of x[0..8) times the 8 16-bit values of w, in f32.
template <typename T>
__device__ __forceinline__ float dot8f(const float (&x)[8], const uint4& w) {
  float wf[8];
  to_floats(w, wf, T{});
  float sum = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) sum = fmaf(x[e], wf[e], sum);
  return sum;
}

// Σ of the 8 products of two 16-byte vectors of 16-bit values, in f32.
template <typename T>
__device__ __forceinline__ float dot8(const uint4& x, const uint4& w) {
  float xf[8];
  to_floats(x, xf, T{});
  return dot8f<T>(xf, w);
}

// x [m, k] (kSiluMul: [m, 2k], gate | up), w [n, k], y [m, n]; kM ≥ m (rows
// ≥ m are skipped), kR weight rows per warp; kSplitK: the block's warps share
// their rows, each a quarter of k. norm_weight [k] for kRmsNorm, bias [n] or
// null; accumulate: y += the result.
template <typename T, typename TOut, int kM, int kR, FusedInput kInput, bool kSplitK>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, TOut* __restrict__ y, int m, int64_t n, int64_t k,
                const T* __restrict__ norm_weight, float eps, const T* __restrict__ bias, bool accumulate,
                bool early, PrefetchRanges prefetch) {
  static_assert(kM * kR <= kGemvWarps * 32, "split-k: a thread per stored output");
  if (!early) wait_for_previous_kernel();
  constexpr int kUnroll = 8 / kR;
  constexpr int kLaneStride = kSplitK ? 32 * kGemvWarps : 32;  // chunks between a lane's consecutive loads
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t first = (kSplitK ? int64_t(blockIdx.x) : int64_t(blockIdx.x) * kGemvWarps + warp) * kR;
  const int start = kSplitK ? warp * 32 + lane : lane;  // the lane's first chunk
  if (first >= n) {  // split-k: the whole block, so no warp is left at its barrier
    if (early) wait_for_previous_kernel();
    return;
  }
  const int64_t chunks = k / 8;
  const int64_t x_row_chunks = kInput == FusedInput::kSiluMul ? 2 * chunks : chunks;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const uint4* gv = reinterpret_cast<const uint4*>(norm_weight);
  const uint4* wv[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    // Rows past n re-read the last row (never stored): no branch in the loop.
    wv[r] = reinterpret_cast<const uint4*>(w + min(first + r, n - 1) * k);
  }
  float acc[kM][kR], squares[kM];
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    squares[i] = 0.0f;
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[i][r] = 0.0f;
  }

  uint4 wr[kUnroll][kR];
  auto load_weights = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + kLaneStride * u;
#pragma unroll
      for (int r = 0; r < kR; ++r) wr[u][r] = c < chunks ? __ldcs(wv[r] + c) : make_uint4(0, 0, 0, 0);
    }
  };
  // No kernel before this one writes the weights: with `early` their first
  // loads are in flight while the previous kernel finishes.
  load_weights(start);
  if (early) wait_for_previous_kernel();
  for (int64_t base = start; base < chunks; base += kLaneStride * kUnroll) {
    if (base != start) load_weights(base);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = base + kLaneStride * u;
      if (c >= chunks) break;
      if constexpr (kInput == FusedInput::kPlain) {
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          if (i >= m) break;
          const uint4 xr = __ldg(xv + i * chunks + c);
#pragma unroll
          for (int r = 0; r < kR; ++r) acc[i][r] += dot8<T>(xr, wr[u][r]);
        }
      } else {
        float g[8];
        if constexpr (kInput == FusedInput::kRmsNorm) to_floats(__ldg(gv + c), g, T{});
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          if (i >= m) break;
          float xf[8];
          to_floats(__ldg(xv + i * x_row_chunks + c), xf, T{});
          if constexpr (kInput == FusedInput::kRmsNorm) {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              squares[i] = fmaf(xf[e], xf[e], squares[i]);
              xf[e] *= g[e];
            }
          } else {  // silu(gate) · up
            float up[8];
            to_floats(__ldg(xv + i * x_row_chunks + chunks + c), up, T{});
#pragma unroll
            for (int e = 0; e < 8; ++e) xf[e] = __fdividef(xf[e], 1.0f + __expf(-xf[e])) * up[e];
          }
#pragma unroll
          for (int r = 0; r < kR; ++r) acc[i][r] += dot8f<T>(xf, wr[u][r]);
        }
      }
    }
  }
  if (early) allow_next_kernel();
  // Warps past n returned above, so the slices are cut among those that did not.
  prefetch_l2_slice(prefetch, int64_t(blockIdx.x) * kGemvWarps + warp,
                    kSplitK ? (n + kR - 1) / kR * kGemvWarps : (n + kR - 1) / kR, lane);
  if constexpr (kSplitK) {
    // The warps' sums (and sums of squares) meet in shared memory; thread
    // i·kR + r stores column first + r of row i.
    __shared__ float sums[kGemvWarps][kM][kR + 1];
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      if (i >= m) break;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const float v = warp_sum(acc[i][r]);
        if (lane == 0) sums[warp][i][r] = v;
      }
      if constexpr (kInput == FusedInput::kRmsNorm) {
        const float v = warp_sum(squares[i]);
        if (lane == 0) sums[warp][i][kR] = v;
      }
    }
    __syncthreads();
    const int i = threadIdx.x / kR, r = threadIdx.x % kR;
    if (i < m && first + r < n) {
      float v = 0.0f, row_squares = 0.0f;
#pragma unroll
      for (int s = 0; s < kGemvWarps; ++s) {
        v += sums[s][i][r];
        if constexpr (kInput == FusedInput::kRmsNorm) row_squares += sums[s][i][kR];
      }
      if constexpr (kInput == FusedInput::kRmsNorm) v *= rsqrtf(row_squares / static_cast<float>(k) + eps);
      TOut* target = y + int64_t(i) * n + first + r;
      if (bias != nullptr) v += to_float(bias[first + r]);
      if (accumulate) v += to_float(*target);
      *target = from_float<TOut>(v);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      if (i >= m) break;
      float row_scale = 1.0f;
      if constexpr (kInput == FusedInput::kRmsNorm) {
        row_scale = rsqrtf(warp_sum(squares[i]) / static_cast<float>(k) + eps);
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        float v = warp_sum(acc[i][r]) * row_scale;
        if (lane == 0 && first + r < n) {
          TOut* target = y + int64_t(i) * n + first + r;
          if (bias != nullptr) v += to_float(bias[first + r]);
          if (accumulate) v += to_float(*target);
          *target = from_float<TOut>(v);
        }
      }
    }
  }
}

template <typename T, typename TOut, int kR, FusedInput kInput, bool kSplitK>
void launch_rows(const T* x, const T* w, TOut* y, int64_t m, int64_t n, int64_t k, const GemvFusion& f,
                 cudaStream_t stream) {
  const int64_t rows_per_block = kSplitK ? kR : int64_t(kGemvWarps) * kR;
  const unsigned grid = static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block);
  const int mm = static_cast<int>(m);
  const T* g = static_cast<const T*>(f.norm_weight);
  const T* bias = static_cast<const T*>(f.bias);
#define TESSERA_GEMV_M(M)                                                                                   \
  launch_after(gemv_kernel<T, TOut, M, kR, kInput, kSplitK>, grid, kGemvWarps * 32, 0, stream, x, w, y, mm, n, k, g, \
               f.eps, bias, f.accumulate, early_successor_launch() && programmatic_launch_enabled(), f.prefetch)
  if (m == 1) TESSERA_GEMV_M(1);
  else if (m == 2) TESSERA_GEMV_M(2);
  else if (m <= 4) TESSERA_GEMV_M(4);
  else if (m <= 8) TESSERA_GEMV_M(8);
  else TESSERA_GEMV_M(16);
#undef TESSERA_GEMV_M
}

template <typename T, typename TOut, FusedInput kInput, bool kSplitK>
void launch_split(const T* x, const T* w, TOut* y, int64_t m, int64_t n, int64_t k, int rows_per_warp,
                  const GemvFusion& f, cudaStream_t stream) {
  switch (rows_per_warp) {
    case 1: launch_rows<T, TOut, 1, kInput, kSplitK>(x, w, y, m, n, k, f, stream); break;
    case 2: launch_rows<T, TOut, 2, kInput, kSplitK>(x, w, y, m, n, k, f, stream); break;
    case 4: launch_rows<T, TOut, 4, kInput, kSplitK>(x, w, y, m, n, k, f, stream); break;
    default: throw Error(ErrorKind::kInternal, "gemv: rows_per_warp must be 1, 2 or 4");
  }
}

template <typename T, typename TOut, FusedInput kInput>
void launch_input(const T* x, const T* w, TOut* y, int64_t m, int64_t n, int64_t k, GemvVariant variant,
                  const GemvFusion& f, cudaStream_t stream) {
  if (variant.split_k) return launch_split<T, TOut, kInput, true>(x, w, y, m, n, k, variant.rows_per_warp, f, stream);
  launch_split<T, TOut, kInput, false>(x, w, y, m, n, k, variant.rows_per_warp, f, stream);
}

// f32 outputs (the logits) come only from plain inputs: no kernel is built for the rest.
template <typename T, typename TOut>
void launch_typed(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, GemvVariant variant,
                  const GemvFusion& f, cudaStream_t stream) {
  const T* xt = static_cast<const T*>(x);
  const T* wt = static_cast<const T*>(w);
  TOut* yt = static_cast<TOut*>(y);
  if constexpr (std::is_same_v<T, TOut>) {
    if (f.input == FusedInput::kRmsNorm) return launch_input<T, TOut, FusedInput::kRmsNorm>(xt, wt, yt, m, n, k, variant, f, stream);
    if (f.input == FusedInput::kSiluMul) return launch_input<T, TOut, FusedInput::kSiluMul>(xt, wt, yt, m, n, k, variant, f, stream);
  }
  launch_input<T, TOut, FusedInput::kPlain>(xt, wt, yt, m, n, k, variant, f, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_supported(const void* x, const void* w, int64_t m, int64_t k, DType in_dtype, DType out_dtype) {
  const bool half_type = in_dtype == DType::kF16 || in_dtype == DType::kBF16;
  return half_type && (out_dtype == in_dtype || out_dtype == DType::kF32) && m >= 1 && m <= kGemvMaxRows &&
         k % 8 == 0 && k > 0 && aligned16(x) && aligned16(w);
}

bool gemv_fusion_supported(const GemvFusion& fusion, const void* x, const void* w, int64_t m, int64_t k,
                           DType in_dtype, DType out_dtype) {
  if (!gemv_supported(x, w, m, k, in_dtype, out_dtype)) return false;
  if (fusion.input != FusedInput::kPlain && out_dtype != in_dtype) return false;
  for (int i = 0; i < 2; ++i) {
    const int64_t bytes = fusion.prefetch.bytes[i];
    if (bytes < 0 || (bytes > 0 && (!aligned16(fusion.prefetch.base[i]) || bytes % 16 != 0))) return false;
  }
  return fusion.input != FusedInput::kRmsNorm || (fusion.norm_weight != nullptr && aligned16(fusion.norm_weight));
}

std::string GemvVariant::name() const {
  return fmt::format("gemv/r{}{}", rows_per_warp, split_k ? "/split-k" : "");
}

void launch_gemv(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype,
                 DType out_dtype, GemvVariant variant, cudaStream_t stream) {
  launch_gemv_fused(x, w, y, m, n, k, in_dtype, out_dtype, variant, GemvFusion{}, stream);
}

void launch_gemv_fused(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype,
                       DType out_dtype, GemvVariant variant, const GemvFusion& fusion, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  if (!gemv_fusion_supported(fusion, x, w, m, k, in_dtype, out_dtype)) {
    throw Error(ErrorKind::kInternal, "gemv called for sizes, pointers or a fusion it does not handle");
  }
  if (in_dtype == DType::kF16) {
    if (out_dtype == DType::kF32) launch_typed<__half, float>(x, w, y, m, n, k, variant, fusion, stream);
    else launch_typed<__half, __half>(x, w, y, m, n, k, variant, fusion, stream);
  } else {
    if (out_dtype == DType::kF32) launch_typed<__nv_bfloat16, float>(x, w, y, m, n, k, variant, fusion, stream);
    else launch_typed<__nv_bfloat16, __nv_bfloat16>(x, w, y, m, n, k, variant, fusion, stream);
  }
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::backend::cuda
