#include "backend/cuda/cuda_graph.h"

#include "backend/cuda/cuda_check.h"

namespace tessera::backend::cuda {

CudaGraph::~CudaGraph() {
  // Never throws: a failure here has nobody left to report to. The exec's
  // memory nodes are released with it once the stream is done with them.
  cudaStreamSynchronize(stream_);
  cudaGraphExecDestroy(exec_);
}

void CudaGraph::replay() { TESSERA_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

void begin_stream_capture(cudaStream_t stream) {
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TESSERA_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

std::unique_ptr<CudaGraph> end_stream_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is not sticky: clear it before reporting
    throw_cuda_error(ended, "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    cudaGetLastError();
    throw_cuda_error(instantiated, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  return std::make_unique<CudaGraph>(exec, stream);
}

}  // namespace tessera::backend::cuda
