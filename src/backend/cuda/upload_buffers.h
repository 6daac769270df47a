// The CUDA backend's host <-> device buffers for small per-step data: the
// device copies of a step's inputs (token ids, positions, block tables, the
// query tiles, RoPE frequencies, sampling rows) and the page-locked landing
// place of device-to-host copies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"

namespace tessera::backend::cuda {

// A device copy of a few host bytes, reallocated only when it grows (then
// `generation` is bumped: recorded graphs read the old buffer). Bytes equal
// to the last upload are not copied again: of a decode step's inputs only
// the token ids and positions change from step to step, and each copy from
// pageable memory is a transfer of its own ahead of the step's kernels (and
// may wait for the stream). No kernel writes these buffers.
class DeviceBuffer {
 public:
  // data[0, bytes) on the device (null for 0 bytes). Pageable source: the
  // copy is staged before the call returns, so `data` may change afterwards.
  const void* upload(const void* data, size_t bytes, Allocator& allocator, cudaStream_t stream, uint64_t& generation);
  // Where the last upload of `bytes` went (recording a graph: no copy).
  const void* current(size_t bytes) const;

 private:
  Tensor buffer_;
  std::vector<uint8_t> last_;  // what buffer_ holds
};

// DeviceBuffer for a vector of ints or floats.
template <typename V>
class DeviceVector {
 public:
  const V* upload(const std::vector<V>& host, Allocator& allocator, cudaStream_t stream, uint64_t& generation) {
    return static_cast<const V*>(bytes_.upload(host.data(), host.size() * sizeof(V), allocator, stream, generation));
  }
  const V* current(size_t count) const { return static_cast<const V*>(bytes_.current(count * sizeof(V))); }

 private:
  DeviceBuffer bytes_;
};

// Page-locked host memory for copies to the host: a device-to-host copy into
// pageable memory runs at a few GB/s (the logits of one decode step, 370 KB,
// took 145 us), into pinned memory at the bus's speed.
class PinnedStaging {
 public:
  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging();  // never throws
  void* reserve(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessera::backend::cuda
