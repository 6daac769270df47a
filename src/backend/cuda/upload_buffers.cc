#include "backend/cuda/upload_buffers.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace tessera::backend::cuda {

const void* DeviceBuffer::upload(const void* data, size_t bytes, Allocator& allocator, cudaStream_t stream,
                                 uint64_t& generation) {
  if (bytes == 0) return nullptr;
  const auto* first = static_cast<const uint8_t*>(data);
  if (!buffer_.defined() || buffer_.nbytes() < bytes) {
    buffer_ = Tensor::empty({static_cast<int64_t>(2 * bytes)}, DType::kU8, allocator);
    ++generation;
    last_.clear();
  } else if (std::equal(first, first + bytes, last_.begin(), last_.end())) {
    return buffer_.raw_data();
  }
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(buffer_.raw_data(), data, bytes, cudaMemcpyHostToDevice, stream));
  last_.assign(first, first + bytes);
  return buffer_.raw_data();
}

const void* DeviceBuffer::current(size_t bytes) const {
  if (bytes == 0) return nullptr;
  if (!buffer_.defined() || buffer_.nbytes() < bytes) {
    throw Error(ErrorKind::kInternal, "cuda backend: a graph records inputs no forward uploaded before");
  }
  return buffer_.raw_data();
}

PinnedStaging::~PinnedStaging() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

void* PinnedStaging::reserve(size_t bytes) {
  if (bytes > bytes_) {
    if (data_ != nullptr) TESSERA_CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    bytes_ = 0;
    TESSERA_CUDA_CHECK(cudaMallocHost(&data_, bytes));
    bytes_ = bytes;
  }
  return data_;
}

}  // namespace tessera::backend::cuda
