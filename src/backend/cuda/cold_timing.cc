#include "backend/cuda/cold_timing.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/l2_prefetch.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::backend::cuda {

namespace {

// Timing events, destroyed however the measurement ends (also when making
// one of them fails).
struct Events {
  std::vector<cudaEvent_t> events;
  explicit Events(size_t count) : events(count, nullptr) {
    for (cudaEvent_t& e : events) {
      const cudaError_t status = cudaEventCreate(&e);
      if (status != cudaSuccess) {
        release();
        TESSERA_CUDA_CHECK(status);
      }
    }
  }
  ~Events() { release(); }
  void release() noexcept {
    for (cudaEvent_t& e : events) {
      if (e != nullptr) cudaEventDestroy(e);
      e = nullptr;
    }
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

// Seconds a call over the event pairs (start, stop) recorded on the stream.
double mean_seconds(const Events& events, int repeats) {
  TESSERA_CUDA_CHECK(cudaEventSynchronize(events.events.back()));
  double total_ms = 0.0;
  for (size_t i = 0; i + 1 < events.events.size(); i += 2) {
    float ms = 0.0f;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, events.events[i], events.events[i + 1]));
    total_ms += ms;
  }
  return total_ms * 1e-3 / repeats;
}

}  // namespace

double seconds_per_call_back_to_back(cudaStream_t stream, const std::function<void()>& fn, int repeats) {
  fn();  // warm-up: plans, instruction cache
  Events events(2);
  TESSERA_CUDA_CHECK(cudaEventRecord(events.events[0], stream));
  for (int i = 0; i < repeats; ++i) fn();
  TESSERA_CUDA_CHECK(cudaEventRecord(events.events[1], stream));
  return mean_seconds(events, repeats);
}

ColdTimer::ColdTimer(cudaStream_t stream, Allocator& allocator, int device) : stream_(stream) {
  const char* setting = std::getenv("TESSERA_COLD_TIMING");
  if (setting != nullptr && std::string(setting) == "0") return;
  int l2 = 0;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device));
  const int64_t bytes = (2 * static_cast<int64_t>(l2) + 15) / 16 * 16;
  try {
    scratch_ = Tensor::empty({bytes}, DType::kU8, allocator);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kOutOfMemory) throw;
    log_warning("no room for {} MB to time kernels with a cold L2: their first calls are timed back to back",
                bytes >> 20);
  }
}

double ColdTimer::seconds_per_call(const std::function<void()>& fn, int repeats) {
  if (!scratch_.defined()) return seconds_per_call_back_to_back(stream_, fn, repeats);
  fn();  // warm-up
  Events events(2 * static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    launch_read_through_l2(scratch_.raw_data(), static_cast<int64_t>(scratch_.nbytes()), multiprocessors_, stream_);
    TESSERA_CUDA_CHECK(cudaEventRecord(events.events[2 * i], stream_));
    fn();
    TESSERA_CUDA_CHECK(cudaEventRecord(events.events[2 * i + 1], stream_));
  }
  return mean_seconds(events, repeats);
}

}  // namespace tessera::backend::cuda
