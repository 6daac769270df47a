// A hand-written GEMV / skinny GEMM for decode: y [m, n] = x [m, k] · w [n, k]ᵀ
// for m ≤ 16 rows of 16-bit x and w, f32 accumulation, y in the input type or
// f32 (the logits). Decode's linear layers read every weight once per step and
// do almost no arithmetic per byte, so what matters is keeping enough 16-byte
// weight loads in flight; cuBLASLt's kernels for m = 1 are tiled for larger m.
// Which of this and cuBLASLt is faster is decided by timing both (gemm.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/l2_prefetch.h"
#include "core/dtype.h"

namespace tessera::backend::cuda {

constexpr int64_t kGemvMaxRows = 16;

// What the GEMV forms around the product (gemv.cu says how), each saving a
// decode step one kernel:
//   input   kPlain x [m, k]; kRmsNorm rms_norm(x, norm_weight [k] (16-byte
//           aligned, the input type), eps); kSiluMul silu(gate) · up of
//           x [m, 2k] = gate | up
//   bias    [n] added, or null
//   accumulate  y += the result (y is the residual stream) instead of y =
// Fused inputs need y in the input type.
enum class FusedInput { kPlain, kRmsNorm, kSiluMul };
struct GemvFusion {
  FusedInput input = FusedInput::kPlain;
  const void* norm_weight = nullptr;
  float eps = 0.0f;
  const void* bias = nullptr;
  bool accumulate = false;
  // What to warm the L2 cache with once the weight loop is done (each warp
  // one slice), so it is on chip for the kernels after the next one.
  PrefetchRanges prefetch;
};

// Whether launch_gemv handles these sizes and pointers: m in [1, 16], k a
// multiple of 8 (one 16-byte load holds 8 elements), 16-bit inputs, x and w
// 16-byte aligned, y f32 or the input type.
bool gemv_supported(const void* x, const void* w, int64_t m, int64_t k, DType in_dtype, DType out_dtype);

// Each warp computes `rows_per_warp` (1, 2 or 4) consecutive outputs of every
// x row: more rows per warp means more loads in flight per lane, fewer warps.
// With split_k the four warps of a block share their outputs, each reading a
// quarter of k: four times the warps, each a quarter of the row to walk.
struct GemvVariant {
  int rows_per_warp = 1;
  bool split_k = false;
  std::string name() const;  // "gemv/r2", "gemv/r4/split-k"
};
// The variants a timed choice tries (gemm.h).
inline constexpr GemvVariant kGemvVariants[] = {{1, false}, {2, false}, {4, false},
                                                {1, true},  {2, true},  {4, true}};

void launch_gemv(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype,
                 DType out_dtype, GemvVariant variant, cudaStream_t stream);

// gemv_supported, and the fusion's conditions (y in the input type for a
// fused input, a 16-byte aligned norm weight).
bool gemv_fusion_supported(const GemvFusion& fusion, const void* x, const void* w, int64_t m, int64_t k,
                           DType in_dtype, DType out_dtype);
void launch_gemv_fused(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype,
                       DType out_dtype, GemvVariant variant, const GemvFusion& fusion, cudaStream_t stream);

}  // namespace tessera::backend::cuda
