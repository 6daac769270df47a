// What the machine's GPUs are: how many the runtime sees, and one's name,
// compute capability, memory and the kernel image loaded for it.
#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace tessera::backend {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error here, just none
    return 0;
  }
  return count;
}

CudaDeviceInfo cuda_device_info(int index) {
  cudaDeviceProp properties{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  CudaDeviceInfo info;
  info.name = properties.name;
  info.compute_major = properties.major;
  info.compute_minor = properties.minor;
  int current = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  TESSERA_CUDA_CHECK(cudaSetDevice(index));
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&info.free_memory, &info.total_memory));
  cuda::loaded_kernel_image(&info.image_ptx_arch, &info.image_binary_arch);
  info.built_archs = TESSERA_CUDA_ARCHS_STRING;
  TESSERA_CUDA_CHECK(cudaSetDevice(current));
  return info;
}

}  // namespace tessera::backend
