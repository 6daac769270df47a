// Which kernel image the CUDA runtime loaded for the current device. A fat
// binary holds SASS for some architectures and PTX for others; the runtime
// takes the SASS matching the device, or else JIT-compiles the newest PTX not
// newer than the device. The capabilities the kernels were compiled for
// (__CUDA_ARCH__) are the PTX architecture's, whatever the device can do, so
// that, not the device, decides what tessera may ask of them (bf16, mma).
#include <cuda_runtime.h>

#include "backend/cuda/kernels.h"

namespace tessera::backend::cuda {

namespace {

// Compiled like every other kernel (same architecture list); never launched.
__global__ void kernel_image_probe() {}

}  // namespace

bool loaded_kernel_image(int* ptx_arch, int* binary_arch) {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel_image_probe) != cudaSuccess) {
    cudaGetLastError();  // cudaErrorNoKernelImageForDevice is not sticky
    *ptx_arch = *binary_arch = 0;
    return false;
  }
  *ptx_arch = attributes.ptxVersion;
  *binary_arch = attributes.binaryVersion;
  return true;
}

}  // namespace tessera::backend::cuda
