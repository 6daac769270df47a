// GroupAbort: the flag one rank raises to fail its whole group at once.
//
// Shared by the communicators of one in-process group. Peers polling a
// collective (NCCL's non-blocking calls, the custom all-reduce's host wait)
// see it and fail with Error(kCommFailure) naming the rank and reason, instead
// of waiting for their timeout. The custom all-reduce kernels also read it
// through `device_word` (host memory mapped into every device), so a kernel
// spinning at a barrier for a rank that will never come leaves.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace tessera::comm {

class GroupAbort {
 public:
  // The first call wins; later ones are ignored. Never throws.
  void raise(int rank, const std::string& reason) noexcept {
    {
      std::lock_guard lock(mutex_);
      if (raised_.load()) return;
      try {
        message_ = "rank " + std::to_string(rank) + " aborted the group: " + reason;
      } catch (...) {
      }
      raised_.store(true);
    }
    if (device_word) *device_word = 1;
  }
  bool raised() const noexcept { return raised_.load(); }
  std::string message() const {
    std::lock_guard lock(mutex_);
    return message_;
  }

  // Host-mapped word the kernels poll (set by the group that owns it); null if none.
  volatile int* device_word = nullptr;

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> raised_{false};
  std::string message_;
};

}  // namespace tessera::comm
