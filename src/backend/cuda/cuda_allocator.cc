#include "backend/cuda/cuda_allocator.h"

#include <fmt/format.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace tessera::backend::cuda {

StreamOwner::StreamOwner(int device) : device_(device) {
  TESSERA_CUDA_CHECK(cudaSetDevice(device));
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

StreamOwner::~StreamOwner() {
  // Never throws: errors of these last calls have nobody left to report to.
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
  cudaSetDevice(current);
}

CudaAllocator::CudaAllocator(std::shared_ptr<StreamOwner> stream) : stream_(std::move(stream)) {
  cudaMemPool_t pool;
  TESSERA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, stream_->device()));
  uint64_t keep_everything = UINT64_MAX;
  TESSERA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
}

std::optional<Allocator::Usage> CudaAllocator::usage() const {
  cudaMemPool_t pool;
  uint64_t current = 0, high = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, stream_->device()) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &current) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess) {
    cudaGetLastError();  // not an error of the device: the caller estimates instead
    return std::nullopt;
  }
  return Usage{static_cast<size_t>(current), static_cast<size_t>(high)};
}

void CudaAllocator::reset_peak() {
  cudaMemPool_t pool;
  uint64_t zero = 0;  // the high watermark restarts from what is in use now
  if (cudaDeviceGetDefaultMemPool(&pool, stream_->device()) != cudaSuccess ||
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero) != cudaSuccess) {
    cudaGetLastError();
  }
}

void CudaAllocator::release_unused() {
  cudaMemPool_t pool;
  if (cudaStreamSynchronize(stream_->stream()) != cudaSuccess ||
      cudaDeviceGetDefaultMemPool(&pool, stream_->device()) != cudaSuccess || cudaMemPoolTrimTo(pool, 0) != cudaSuccess) {
    cudaGetLastError();  // only memory left cached: the next allocation reports a real failure
  }
}

std::shared_ptr<Buffer> CudaAllocator::allocate(size_t size) {
  void* data = nullptr;
  if (size > 0) {
    cudaError_t status = cudaMallocAsync(&data, size, stream_->stream());
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state of a failed allocation
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw Error(ErrorKind::kOutOfMemory,
                  fmt::format("cuda:{}: allocating {:.1f} MiB failed ({}); {:.1f} MiB free of {:.1f} MiB", stream_->device(),
                              size / 1048576.0, cudaGetErrorString(status), free_bytes / 1048576.0,
                              total_bytes / 1048576.0),
                  "lower --cache-max-entry-count, --max-batch-size, --max-prefill-token-num or --session-len");
    }
  }
  std::shared_ptr<StreamOwner> owner = stream_;
  return std::make_shared<Buffer>(data, size, Device::cuda(owner->device()), [owner](void* p) {
    if (p == nullptr) return;
    // Destructors never throw: a failure here is left to the next checked call.
    int current = 0;
    cudaGetDevice(&current);
    if (current != owner->device()) cudaSetDevice(owner->device());
    cudaFreeAsync(p, owner->stream());
    if (current != owner->device()) cudaSetDevice(current);
  });
}

}  // namespace tessera::backend::cuda
