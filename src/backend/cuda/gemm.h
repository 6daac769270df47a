// Linear layers through cuBLASLt: y [m, n] = x [m, k] · w [n, k]ᵀ with 16-bit
// (or f32) inputs and f32 accumulation; y may be f32 (the logits) or the input
// type. The algorithm cuBLASLt's heuristic picks is cached per shape and types.
//
// For skinny shapes (m ≤ 16 rows, decode) the hand-written GEMV (gemv.h) is a
// candidate too: at the first call of a shape both are timed on the real
// operands (CUDA events, a few repeats each) and the faster is kept for that
// shape, logged at debug level. TESSERA_GEMV=0 keeps cuBLASLt everywhere,
// TESSERA_GEMV=1 takes the GEMV wherever it applies (comparisons).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tessera::backend::cuda {

class Gemm {
 public:
  Gemm(cudaStream_t stream, Allocator& allocator);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // x [m, k] and w [n, k] share a dtype; y [m, n] is f32 or that dtype.
  void linear(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype);

  // The kernel chosen for a shape so far: "cublaslt", "gemv/rN" or "" (not decided yet).
  std::string choice_for(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype) const;

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, DType, DType>;
  struct Plan;
  Plan& plan_for(const Key& key);
  void run_cublas(const void* x, const void* w, void* y, const Key& key);
  // 0: cuBLASLt, 1/2/4: the GEMV with that many rows per warp.
  int choose(const void* x, const void* w, void* y, const Key& key);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  Tensor workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, int> choices_;
  int gemv_mode_ = -1;  // TESSERA_GEMV: -1 decide by timing, 0 never, 1 always where it applies
};

}  // namespace tessera::backend::cuda
