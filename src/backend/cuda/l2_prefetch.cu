#include "backend/cuda/l2_prefetch.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/l2_prefetch.cuh"
#include "backend/cuda/launch.cuh"

namespace tessera::backend::cuda {

namespace {

// One warp a block, one slice a warp. No kernel writes the weights, so the
// prefetch goes out before the wait; the wait keeps the stream's order for
// the kernels after this one (launch.cuh).
__global__ void __launch_bounds__(32) prefetch_l2_kernel(PrefetchRanges ranges) {
  prefetch_l2_slice(ranges, blockIdx.x, gridDim.x, threadIdx.x);
  wait_for_previous_kernel();
}

}  // namespace

void launch_prefetch_l2(const PrefetchRanges& ranges, int parts, cudaStream_t stream) {
  if (ranges.total() <= 0 || parts <= 0) return;
  launch_after(prefetch_l2_kernel, dim3(parts), dim3(32), 0, stream, ranges);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::backend::cuda
