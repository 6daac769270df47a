// Linear layers through cuBLASLt: y [m, n] = x [m, k] · w [n, k]ᵀ with 16-bit
// (or f32) inputs and f32 accumulation; y may be f32 (the logits) or the input
// type. The algorithm cuBLASLt's heuristic picks is cached per shape and types.
//
// For skinny shapes (m ≤ 16 rows, decode) the hand-written GEMV (gemv.h) is a
// candidate too: at the first call of a shape both are timed on the real
// operands (CUDA events, a few repeats each) and the GEMV is kept for that
// shape unless cuBLASLt is faster by more than a tenth (gemm.cc says why),
// logged at debug level. TESSERA_GEMV=0 keeps cuBLASLt everywhere,
// TESSERA_GEMV=1 takes the GEMV wherever it applies (comparisons);
// TESSERA_GEMV_SPLIT_K=0 leaves the split-k variants out.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/gemv.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tessera::backend::cuda {

// The kernel of a skinny shape from its first-call timings (ms): the
// fastest GEMV variant of gemv_ms (its choice number, time) unless cuBLASLt's
// time (infinity where it was not timed) is under nine tenths of it; 0 is
// cuBLASLt.
int choose_linear_kernel(float cublas_ms, const std::vector<std::pair<int, float>>& gemv_ms);

class Gemm {
 public:
  // Seconds per call of a candidate kernel (the backend's ColdTimer).
  using TimePerCall = std::function<double(const std::function<void()>& fn, int repeats)>;

  Gemm(cudaStream_t stream, Allocator& allocator, TimePerCall time_per_call);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // x [m, k] and w [n, k] share a dtype; y [m, n] is f32 or that dtype.
  // accumulate: y += the product (cuBLASLt's beta = 1, the GEMV's store).
  void linear(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype,
              bool accumulate = false);

  // y = f(x) · wᵀ with the GEMV's fusion (gemv.h) where the GEMV is this
  // shape's kernel (decided as for linear, timing the GEMV variants with
  // this fused input: a fused input adds work to every warp, so its fastest
  // rows per warp may differ from the plain product's); false where cuBLASLt
  // is or the fusion does not apply, and nothing ran.
  bool linear_fused(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype,
                    DType out_dtype, const GemvFusion& fusion);

  // Where a timing run may write an output of `bytes` without allocating: a
  // part of cuBLASLt's workspace (its contents only matter inside one
  // cuBLASLt call), or null when it does not fit.
  void* timing_output(size_t bytes);

  // The kernel chosen for a shape (and fused input) so far: "cublaslt", a GemvVariant's name or "" (not decided yet).
  std::string choice_for(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype,
                         FusedInput input = FusedInput::kPlain) const;

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, DType, DType>;
  struct Plan;
  Plan& plan_for(const Key& key);
  void run_cublas(const void* x, const void* w, void* y, const Key& key, bool accumulate = false);
  // 0: cuBLASLt, i > 0: the GEMV variant kGemvVariants[i - 1]; the
  // candidates are timed on x and w (the GEMV with `fusion`'s input, norm
  // weight and bias), into a scratch output.
  int choose(const void* x, const void* w, const Key& key, const GemvFusion& fusion);

  cudaStream_t stream_;
  TimePerCall time_per_call_;
  cublasLtHandle_t handle_ = nullptr;
  Allocator& allocator_;
  Tensor workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<std::pair<Key, FusedInput>, int> choices_;
  int gemv_mode_ = -1;  // TESSERA_GEMV: -1 decide by timing, 0 never, 1 always where it applies
  bool split_k_ = true;  // TESSERA_GEMV_SPLIT_K=0: no split-k variant among the candidates
};

}  // namespace tessera::backend::cuda
