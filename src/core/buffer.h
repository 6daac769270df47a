// Buffer: one owned block of memory, released by its destructor (RAII).
//
// Tensors share buffers through shared_ptr, so a view keeps its memory alive.
// A buffer either comes from an Allocator or wraps memory someone else owns
// (a memory-mapped checkpoint) together with a keep-alive handle for it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

#include "core/device.h"

namespace tessera {

class Buffer {
 public:
  // Takes ownership: `release` is called once with `data` when the buffer dies.
  Buffer(void* data, size_t size, Device device, std::function<void(void*)> release);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }

  // A non-owning buffer over external memory; `keep_alive` is held until the
  // buffer dies (e.g. the mapping a checkpoint tensor points into).
  static std::shared_ptr<Buffer> wrap(const void* data, size_t size, Device device,
                                      std::shared_ptr<const void> keep_alive);

 private:
  void* data_;
  size_t size_;
  Device device_;
  std::function<void(void*)> release_;
};

// Hands out buffers for one device. The CPU allocator is below; the CUDA one
// (caching, stream-ordered) lives in the CUDA backend.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Throws Error(kOutOfMemory) with the requested size when it cannot.
  virtual std::shared_ptr<Buffer> allocate(size_t size) = 0;
  virtual Device device() const = 0;

  // The memory plan measures a warm-up forward with these: bytes handed out
  // and not released yet, and the most at any time since reset_peak(). An
  // allocator that cannot count returns nullopt.
  struct Usage {
    size_t in_use = 0;
    size_t peak = 0;
  };
  virtual std::optional<Usage> usage() const { return std::nullopt; }
  virtual void reset_peak() {}
  // Gives memory a caching allocator keeps for reuse back to the device (after
  // the warm-up, so the KV cache can have it); a no-op elsewhere.
  virtual void release_unused() {}
};

// 64-byte aligned host memory, zero-filled.
Allocator& cpu_allocator();

}  // namespace tessera
