#include "backend/cuda/gemm.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::backend::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: break;
  }
  throw Error(ErrorKind::kUnsupported, std::string("cuBLASLt linear: no support for dtype ") + dtype_name(dtype));
}

}  // namespace

// Row-major y[m, n] = x[m, k] · w[n, k]ᵀ is, in cuBLAS's column-major terms,
// Y (n×m) = Wᵀ·X with W stored k×n (lda k, transposed) and X stored k×m (ldb k).
struct Gemm::Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  bool has_algorithm = false;

  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (operation) cublasLtMatmulDescDestroy(operation);
  }
};

Gemm::Gemm(cudaStream_t stream, Allocator& allocator, TimePerCall time_per_call)
    : stream_(stream), time_per_call_(std::move(time_per_call)), allocator_(allocator) {
  if (const char* mode = std::getenv("TESSERA_GEMV")) {
    if (std::strcmp(mode, "0") == 0) gemv_mode_ = 0;
    if (std::strcmp(mode, "1") == 0) gemv_mode_ = 1;
  }
  if (const char* split = std::getenv("TESSERA_GEMV_SPLIT_K")) split_k_ = std::strcmp(split, "0") != 0;
  TESSERA_CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_ = Tensor::empty({static_cast<int64_t>(kWorkspaceBytes)}, DType::kU8, allocator);
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

Gemm::Plan& Gemm::plan_for(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto [m, n, k, in_dtype, out_dtype] = key;
  auto plan = std::make_unique<Plan>();
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                                      sizeof(transpose)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose,
                                                      sizeof(no_transpose)));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, cuda_type(in_dtype), k, n, k));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, cuda_type(in_dtype), k, m, k));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, cuda_type(out_dtype), n, m, n));

  cublasLtMatmulPreference_t preference;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  size_t workspace = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->operation, plan->a, plan->b, plan->c,
                                                         plan->c, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan->algorithm = result.algo;
    plan->has_algorithm = true;
  }
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void Gemm::run_cublas(const void* x, const void* w, void* y, const Key& key, bool accumulate) {
  Plan& plan = plan_for(key);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;  // C = D = y: in place
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.operation, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y,
                                      plan.c, plan.has_algorithm ? &plan.algorithm : nullptr, workspace_.raw_data(),
                                      kWorkspaceBytes, stream_));
}

namespace {

// 0: cuBLASLt; i > 0: kGemvVariants[i - 1].
std::string choice_name(int choice) { return choice == 0 ? "cublaslt" : kGemvVariants[choice - 1].name(); }

}  // namespace

void* Gemm::timing_output(size_t bytes) {
  return bytes <= kWorkspaceBytes / 2 ? static_cast<char*>(workspace_.raw_data()) + kWorkspaceBytes / 2 : nullptr;
}

// cuBLASLt must beat the fastest GEMV by a margin: timed alone, a shape
// shows neither what the GEMV saves around it in a decode step (it launches
// while the kernel before it finishes and lets the next one do the same;
// cuBLASLt's kernels do neither) nor the separate norm or SiLU·mul kernel the
// fused GEMV replaces. Decode shapes where the two are within a few per cent
// (the 7B shape's down projection on an H100) lost a kernel and two launch
// gaps a layer to noise in the timing.
int choose_linear_kernel(float cublas_ms, const std::vector<std::pair<int, float>>& gemv_ms) {
  constexpr float kCublasMargin = 0.9f;  // the fraction of the fastest GEMV's time cuBLASLt must come under
  int best = 0;
  float best_ms = std::numeric_limits<float>::infinity();
  for (auto [variant, ms] : gemv_ms) {
    if (ms < best_ms) {
      best = variant;
      best_ms = ms;
    }
  }
  return best != 0 && !(cublas_ms < kCublasMargin * best_ms) ? best : 0;
}

int Gemm::choose(const void* x, const void* w, const Key& key, const GemvFusion& fusion) {
  auto [m, n, k, in_dtype, out_dtype] = key;
  if (gemv_mode_ == 0 || !gemv_supported(x, w, m, k, in_dtype, out_dtype)) return 0;
  auto it = choices_.find({key, fusion.input});
  if (it != choices_.end()) return it->second;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TESSERA_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
  if (capture != cudaStreamCaptureStatusNone) return 0;  // cannot time inside a graph capture; decide later

  // Time every candidate on the real operands, into a scratch y (the caller's
  // may be a residual the run adds to): cuBLASLt's workspace where y fits,
  // whose contents only matter inside one cuBLASLt call, so nothing is
  // allocated between the collectives of ranks that share a GPU.
  constexpr int kRepeats = 5;
  void* y = timing_output(dtype_bytes(out_dtype, static_cast<size_t>(m * n)));
  Tensor scratch = y != nullptr ? Tensor() : Tensor::empty({m, n}, out_dtype, allocator_);
  if (y == nullptr) y = scratch.raw_data();
  GemvFusion timed = fusion;  // its input, norm weight and bias; no add into y, no prefetch
  timed.accumulate = false;
  timed.prefetch = PrefetchRanges{};
  std::string report;
  float cublas_ms = std::numeric_limits<float>::infinity();
  std::vector<std::pair<int, float>> gemv_ms;
  for (int candidate = gemv_mode_ == 1 ? 1 : 0; candidate <= int(std::size(kGemvVariants)); ++candidate) {
    if (candidate > 0 && kGemvVariants[candidate - 1].split_k && !split_k_) continue;
    auto run = [&] {
      if (candidate == 0) run_cublas(x, w, y, key);
      else launch_gemv_fused(x, w, y, m, n, k, in_dtype, out_dtype, kGemvVariants[candidate - 1], timed, stream_);
    };
    const auto ms = static_cast<float>(time_per_call_(run, kRepeats) * 1e3);  // with a warm-up call first
    report += fmt::format(" {} {:.1f} us", choice_name(candidate), ms * 1e3);
    if (candidate == 0) cublas_ms = ms;
    else gemv_ms.emplace_back(candidate, ms);
  }
  const int best = choose_linear_kernel(cublas_ms, gemv_ms);
  static const char* const kInputNames[] = {"", " rms_norm", " silu_mul"};
  log_debug("linear m={} n={} k={} {}->{}{}:{} -> {}", m, n, k, dtype_name(in_dtype), dtype_name(out_dtype),
            kInputNames[static_cast<int>(fusion.input)], report, choice_name(best));
  choices_.emplace(std::make_pair(key, fusion.input), best);
  return best;
}

std::string Gemm::choice_for(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype,
                             FusedInput input) const {
  auto it = choices_.find({Key{m, n, k, in_dtype, out_dtype}, input});
  return it == choices_.end() ? std::string() : choice_name(it->second);
}

void Gemm::linear(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype,
                  DType out_dtype, bool accumulate) {
  if (m == 0 || n == 0) return;
  const Key key{m, n, k, in_dtype, out_dtype};
  const int choice = choose(x, w, key, GemvFusion{});
  if (choice == 0) {
    run_cublas(x, w, y, key, accumulate);
  } else {
    GemvFusion fusion;
    fusion.accumulate = accumulate;
    launch_gemv_fused(x, w, y, m, n, k, in_dtype, out_dtype, kGemvVariants[choice - 1], fusion, stream_);
  }
}

bool Gemm::linear_fused(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k, DType in_dtype,
                        DType out_dtype, const GemvFusion& fusion) {
  if (m == 0 || n == 0) return true;
  if (!gemv_fusion_supported(fusion, x, w, m, k, in_dtype, out_dtype)) return false;
  const int choice = choose(x, w, {m, n, k, in_dtype, out_dtype}, fusion);
  if (choice == 0) return false;
  launch_gemv_fused(x, w, y, m, n, k, in_dtype, out_dtype, kGemvVariants[choice - 1], fusion, stream_);
  return true;
}

}  // namespace tessera::backend::cuda
