// Recording a stream's work as a CUDA graph and replaying it.
//
// Capture is thread-local (cudaStreamCaptureModeThreadLocal): other threads,
// such as other tensor-parallel ranks' workers, keep allocating and
// launching as usual while one stream records. Allocations made while
// recording (cudaMallocAsync of the forward's activations) become the
// graph's own memory nodes.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "backend/backend.h"

namespace tessera::backend::cuda {

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override;

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

// Starts recording `stream` (throws Error(kDeviceFailure) naming the call).
void begin_stream_capture(cudaStream_t stream);
// Stops recording `stream` and instantiates what it recorded. Always leaves
// the stream out of capture mode; a capture that failed, or a graph that
// cannot be instantiated, is an Error (the stream's queued work is intact).
std::unique_ptr<CudaGraph> end_stream_capture(cudaStream_t stream);
// Whether `stream` is recording now.
bool stream_is_capturing(cudaStream_t stream);

}  // namespace tessera::backend::cuda
