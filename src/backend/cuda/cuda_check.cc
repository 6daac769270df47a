#include "backend/cuda/cuda_check.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::backend::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  const ErrorKind kind = status == cudaErrorMemoryAllocation ? ErrorKind::kOutOfMemory : ErrorKind::kDeviceFailure;
  throw Error(kind, fmt::format("{} failed: {} ({}) at {}:{}", call, cudaGetErrorString(status),
                                cudaGetErrorName(status), file, line),
              kind == ErrorKind::kOutOfMemory ? "lower --cache-max-entry-count, --max-batch-size or --session-len"
                                              : "the GPU reported an error; see the message above");
}

namespace {
// cublasGetStatusString lives in libcublas, which tessera does not link (only cuBLASLt).
const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "unknown cuBLAS status";
  }
}
}  // namespace

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  const ErrorKind kind = status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::kOutOfMemory : ErrorKind::kDeviceFailure;
  throw Error(kind, fmt::format("{} failed: cuBLAS status {} ({}) at {}:{}", call, static_cast<int>(status),
                                cublas_status_name(status), file, line));
}

}  // namespace tessera::backend::cuda
