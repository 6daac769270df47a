// Linear layers through cuBLASLt: y [m, n] = x [m, k] · w [n, k]ᵀ with 16-bit
// (or f32) inputs and f32 accumulation; y may be f32 (the logits) or the input
// type. The algorithm cuBLASLt's heuristic picks is cached per shape and types.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
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

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, DType, DType>;
  struct Plan;
  Plan& plan_for(const Key& key);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  Tensor workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace tessera::backend::cuda
