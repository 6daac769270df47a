#include <fmt/format.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::backend {

DType choose_compute_dtype(const std::string& requested, Device device) {
  if (requested != "auto" && requested != "float16" && requested != "bfloat16" && requested != "float32") {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("unknown --dtype '{}'", requested),
                "use auto, float16, bfloat16 or float32");
  }
  if (device.is_cpu()) {
    if (requested != "auto" && requested != "float32") {
      log_info("the CPU backend computes in float32 (weights are converted from {})", requested);
    }
    return DType::kF32;
  }
  if (requested == "float32") return DType::kF32;
  if (requested == "float16") return DType::kF16;
  const CudaDeviceInfo info = cuda_device_info(device.index);
  if (info.supports_bf16()) return DType::kBF16;
  if (requested == "bfloat16") {
    log_warning("{} ({}, compute capability {}.{}) has no bfloat16; using float16 instead", device.to_string(),
                info.name, info.compute_major, info.compute_minor);
  } else {
    log_info("{} ({}, compute capability {}.{}): computing in float16 (bfloat16 needs 8.0 or newer)",
             device.to_string(), info.name, info.compute_major, info.compute_minor);
  }
  return DType::kF16;
}

}  // namespace tessera::backend
