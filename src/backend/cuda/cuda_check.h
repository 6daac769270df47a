// Every CUDA and cuBLAS call goes through these checks: a failure becomes a
// tessera::Error naming the call, the file and the line (never an abort), with
// kind out_of_memory for allocation failures and device_failure otherwise.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace tessera::backend::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace tessera::backend::cuda

#define TESSERA_CUDA_CHECK(call)                                                           \
  do {                                                                                     \
    cudaError_t tessera_status_ = (call);                                                  \
    if (tessera_status_ != cudaSuccess)                                                    \
      ::tessera::backend::cuda::throw_cuda_error(tessera_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define TESSERA_CUBLAS_CHECK(call)                                                             \
  do {                                                                                         \
    cublasStatus_t tessera_status_ = (call);                                                   \
    if (tessera_status_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::tessera::backend::cuda::throw_cublas_error(tessera_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define TESSERA_CUDA_CHECK_LAUNCH() TESSERA_CUDA_CHECK(cudaGetLastError())
