#include "backend/cuda/launch.cuh"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels.h"

namespace tessera::backend::cuda {

bool early_successor_launch() {
  static const bool on = [] {
    const char* setting = std::getenv("TESSERA_PDL_EARLY");
    return !(setting && std::strcmp(setting, "0") == 0);
  }();
  return on;
}

bool programmatic_launch_enabled() {
  static const bool allowed = [] {
    const char* setting = std::getenv("TESSERA_PDL");
    return !(setting && std::strcmp(setting, "0") == 0);
  }();
  if (!allowed) return false;
  static std::array<std::atomic<int>, 64> known{};  // 0 unknown, 1 off, 2 on
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= static_cast<int>(known.size())) {
    cudaGetLastError();
    return false;
  }
  int state = known[device].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0, ptx = 0, binary = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    const bool image = loaded_kernel_image(&ptx, &binary);
    state = image && major >= 9 && ptx >= 90 ? 2 : 1;
    known[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

}  // namespace tessera::backend::cuda
