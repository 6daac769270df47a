// The compute dtype of a device, from what the device can do and what the
// kernels the CUDA runtime loaded for it can do. A build that embeds only
// compute_75 PTX (the T4 build) running on a newer GPU has no bf16 kernels
// worth the name, so it computes in f16, as it would on the T4 itself.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "backend/backend.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::backend {

namespace {

std::string capability_string(int capability) { return fmt::format("{}.{}", capability / 10, capability % 10); }

std::atomic<PrefillAttentionKernel> g_prefill_kernel{PrefillAttentionKernel::kAuto};

}  // namespace

int CudaDeviceInfo::effective_capability() const {
  if (image_ptx_arch == 0 && image_binary_arch == 0) return 0;
  const int image = std::min(image_ptx_arch > 0 ? image_ptx_arch : 1000, image_binary_arch > 0 ? image_binary_arch : 1000);
  return std::min(device_capability(), image);
}

std::string CudaDeviceInfo::describe_image() const {
  if (image_ptx_arch == 0 && image_binary_arch == 0) {
    return fmt::format("no kernel image for compute capability {} (built for {})",
                       capability_string(device_capability()), built_archs);
  }
  if (image_ptx_arch == image_binary_arch) return fmt::format("SASS for sm_{}", image_binary_arch);
  return fmt::format("PTX from compute_{}, JIT-compiled for sm_{}", image_ptx_arch, image_binary_arch);
}

ComputeDtypeDecision decide_compute_dtype(const std::string& requested, int device_capability, int image_arch) {
  if (requested != "auto" && requested != "float16" && requested != "bfloat16" && requested != "float32") {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("unknown --dtype '{}'", requested),
                "use auto, float16, bfloat16 or float32");
  }
  if (requested == "float32") return {DType::kF32, "", false};
  if (requested == "float16") return {DType::kF16, "", false};
  const int image = image_arch > 0 ? image_arch : device_capability;
  if (std::min(device_capability, image) >= 80) return {DType::kBF16, "", false};
  ComputeDtypeDecision decision{DType::kF16, "", true};
  if (image < device_capability) {
    // The GPU has bf16 (or more than the kernels); the kernels do not.
    decision.message = fmt::format("kernels built for compute capability {} only; bf16 needs 8.0: computing in float16",
                                   capability_string(image));
  } else if (requested == "bfloat16") {
    decision.message = fmt::format("compute capability {} has no bfloat16 (it needs 8.0): computing in float16",
                                   capability_string(device_capability));
  } else {
    // auto on an older GPU: float16 is what the user should expect there.
    decision.message = fmt::format("compute capability {}: computing in float16 (bfloat16 needs 8.0 or newer)",
                                   capability_string(device_capability));
    decision.warn = false;
  }
  return decision;
}

DType choose_compute_dtype(const std::string& requested, Device device) {
  if (device.is_cpu()) {
    if (requested != "auto" && requested != "float32") {
      (void)decide_compute_dtype(requested, 80, 80);  // the same refusal of unknown names
      log_info("the CPU backend computes in float32 (weights are converted from {})", requested);
    }
    return DType::kF32;
  }
  const CudaDeviceInfo info = cuda_device_info(device.index);
  log_info("{} ({}, compute capability {}.{}): kernels loaded as {}", device.to_string(), info.name,
           info.compute_major, info.compute_minor, info.describe_image());
  // effective_capability() is min(device, image), 0 when no image loads (check_supported refuses that).
  const ComputeDtypeDecision decision =
      decide_compute_dtype(requested, info.device_capability(), info.effective_capability());
  if (!decision.message.empty()) {
    if (decision.warn) {
      log_warning("{} ({}): {}", device.to_string(), info.name, decision.message);
    } else {
      log_info("{} ({}): {}", device.to_string(), info.name, decision.message);
    }
  }
  return decision.dtype;
}

void set_prefill_attention_kernel(PrefillAttentionKernel kernel) { g_prefill_kernel.store(kernel); }
PrefillAttentionKernel prefill_attention_kernel() { return g_prefill_kernel.load(); }

}  // namespace tessera::backend
