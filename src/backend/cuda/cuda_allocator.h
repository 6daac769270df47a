// Device memory for one GPU: CUDA's stream-ordered pool allocator
// (cudaMallocAsync / cudaFreeAsync) with the pool told to keep freed memory, so
// per-step activations are reused instead of returned to the driver. Buffers
// are RAII; an allocation that fails reports the requested and free sizes.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "core/buffer.h"

namespace tessera::backend::cuda {

// Owns a CUDA stream; destroyed (after a final sync) when its last user is
// gone. Every buffer holds one, because cudaFreeAsync needs its stream alive:
// buffers may outlive the backend that made them.
class StreamOwner {
 public:
  explicit StreamOwner(int device);
  ~StreamOwner();
  StreamOwner(const StreamOwner&) = delete;
  StreamOwner& operator=(const StreamOwner&) = delete;
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(std::shared_ptr<StreamOwner> stream);
  // Memory is NOT zero-filled (kernels never read what they did not write).
  std::shared_ptr<Buffer> allocate(size_t size) override;
  Device device() const override { return Device::cuda(stream_->device()); }
  cudaStream_t stream() const { return stream_->stream(); }
  // The device pool's counters (cudaMemPoolAttrUsedMemCurrent / High): every
  // allocator of this device shares the pool. nullopt when the driver does not say.
  std::optional<Usage> usage() const override;
  void reset_peak() override;
  // cudaMemPoolTrimTo(pool, 0) once the stream has finished with freed memory.
  void release_unused() override;

 private:
  std::shared_ptr<StreamOwner> stream_;
};

}  // namespace tessera::backend::cuda
