#include "core/buffer.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace tessera {

Buffer::Buffer(void* data, size_t size, Device device, std::function<void(void*)> release)
    : data_(data), size_(size), device_(device), release_(std::move(release)) {}

Buffer::~Buffer() {
  if (release_) release_(data_);
}

std::shared_ptr<Buffer> Buffer::wrap(const void* data, size_t size, Device device,
                                     std::shared_ptr<const void> keep_alive) {
  return std::make_shared<Buffer>(const_cast<void*>(data), size, device,
                                  [keep = std::move(keep_alive)](void*) mutable { keep.reset(); });
}

namespace {
// Bytes of live host buffers (rounded up) and their most since a reset:
// namespace-scope atomics, so buffers released during exit still find them.
std::atomic<size_t> host_in_use{0}, host_peak{0};

class CpuAllocator final : public Allocator {
 public:
  std::optional<Usage> usage() const override { return Usage{host_in_use.load(), host_peak.load()}; }
  void reset_peak() override { host_peak.store(host_in_use.load()); }

  std::shared_ptr<Buffer> allocate(size_t size) override {
    constexpr size_t kAlignment = 64;
    size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
    void* data = rounded == 0 ? nullptr : std::aligned_alloc(kAlignment, rounded);
    if (rounded != 0 && data == nullptr) {
      throw Error(ErrorKind::kOutOfMemory, fmt::format("host allocation of {} bytes failed", size),
                  "free host memory or use a smaller model / --session-len");
    }
    if (data) std::memset(data, 0, rounded);
    const size_t now = host_in_use.fetch_add(rounded) + rounded;
    size_t peak = host_peak.load();
    while (now > peak && !host_peak.compare_exchange_weak(peak, now)) {
    }
    return std::make_shared<Buffer>(data, size, Device::cpu(), [rounded](void* p) {
      std::free(p);
      host_in_use.fetch_sub(rounded);
    });
  }
  Device device() const override { return Device::cpu(); }
};
}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

}  // namespace tessera
