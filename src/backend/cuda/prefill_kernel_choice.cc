#include "backend/cuda/prefill_kernel_choice.h"

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/prefill_sm90.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::backend::cuda {

namespace {

// Logs each distinct line once per process: a forward launches per layer.
void log_once(const std::string& line) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(line).second) log_info("{}", line);
}

}  // namespace

bool use_tensor_core_prefill(DType dtype, int64_t head_dim, int image_arch) {
  const PrefillAttentionKernel wanted = prefill_attention_kernel();
  std::string why_not;
  if (dtype != DType::kF16 && dtype != DType::kBF16) {
    why_not = fmt::format("it computes in {}; tensor cores need float16 or bfloat16", dtype_name(dtype));
  } else if (head_dim != 64 && head_dim != 128) {
    why_not = fmt::format("head_dim {} has no tensor-core kernel (64 and 128 do)", head_dim);
  } else if (image_arch < 80) {
    why_not = image_arch == 0 ? std::string("no image of the tensor-core kernel loads on this device")
                              : fmt::format("kernels built for compute capability {}.{} only; mma.sync needs 8.0",
                                            image_arch / 10, image_arch % 10);
  }
  if (wanted == PrefillAttentionKernel::kTensorCore && !why_not.empty()) {
    throw Error(ErrorKind::kUnsupported, "the tensor-core prefill attention cannot run: " + why_not,
                "use the scalar kernel (PrefillAttentionKernel::kAuto or kScalar)");
  }
  if (wanted == PrefillAttentionKernel::kFlashInfer) {
    throw Error(ErrorKind::kInternal, "the FlashInfer prefill attention was asked for and not taken");
  }
  const bool tensor_core = wanted != PrefillAttentionKernel::kScalar && why_not.empty();
  if (tensor_core) {
    log_once(fmt::format("prefill attention: tensor-core kernel (mma.sync {}, head_dim {}, image {}.{})",
                         dtype_name(dtype), head_dim, image_arch / 10, image_arch % 10));
  } else if (wanted == PrefillAttentionKernel::kScalar) {
    log_once(fmt::format("prefill attention: scalar kernel ({}, head_dim {}, asked for)", dtype_name(dtype), head_dim));
  } else {
    log_once(fmt::format("prefill attention: scalar kernel ({})", why_not));
  }
  return tensor_core;
}

bool use_sm90_prefill(DType dtype, int64_t head_dim, int64_t window, int device_capability) {
  const PrefillAttentionKernel wanted = prefill_attention_kernel();
  if (wanted == PrefillAttentionKernel::kScalar || wanted == PrefillAttentionKernel::kTensorCore) return false;
  static const bool switched_off = [] {
    const char* env = std::getenv("TESSERA_SM90_PREFILL");
    return env != nullptr && std::string(env) == "0";
  }();
  std::string why_not;
  if (!sm90_prefill_built()) {
    why_not = "this build holds no FlashInfer kernel (architectures without 90, or no headers at configure time)";
  } else if (device_capability != 90) {
    why_not = fmt::format("the device has compute capability {}.{}; sm_90a code runs on 9.0 only", device_capability / 10,
                          device_capability % 10);
  } else if (dtype != DType::kBF16) {
    why_not = fmt::format("it computes in {}; the kernel is built for bfloat16", dtype_name(dtype));
  } else if (head_dim != kSm90PrefillHeadDim) {
    why_not = fmt::format("head_dim {}; the kernel is built for {}", head_dim, kSm90PrefillHeadDim);
  } else if (window > 0) {
    why_not = "the model has a sliding window; the kernel is built without one";
  } else if (switched_off && wanted == PrefillAttentionKernel::kAuto) {
    why_not = "TESSERA_SM90_PREFILL=0";
  }
  if (wanted == PrefillAttentionKernel::kFlashInfer && !why_not.empty()) {
    throw Error(ErrorKind::kUnsupported, "the FlashInfer prefill attention cannot run: " + why_not,
                "use tessera's own kernels (PrefillAttentionKernel::kAuto)");
  }
  if (why_not.empty()) {
    log_once(fmt::format("prefill attention: FlashInfer's sm_90a kernel (bf16, head_dim {})", head_dim));
  } else if (device_capability == 90) {
    log_once("prefill attention: not FlashInfer's sm_90a kernel: " + why_not);
  }
  return why_not.empty();
}

}  // namespace tessera::backend::cuda
