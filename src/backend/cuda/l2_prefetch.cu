#include "backend/cuda/l2_prefetch.h"

#include <cstdint>

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

// Reads words [0, count) of `data` through L2 (.cg: not kept in L1). The
// loads' XOR is stored only if it equals `never` (it does not, for the
// caller's value, but the compiler cannot know): reads whose result is
// dropped would be removed. Plain loads, so the lines they leave in L2 are
// clean and a kernel after them writes nothing back for them.
__global__ void read_through_l2_kernel(const uint4* __restrict__ data, int64_t count, uint32_t never,
                                       uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == never) *sink = acc;
}

}  // namespace

void launch_read_through_l2(void* scratch, int64_t bytes, int multiprocessors, cudaStream_t stream) {
  if (bytes < 16) return;
  // The sink is the scratch's own first word: a store there, were one to
  // happen, would change nothing that matters.
  read_through_l2_kernel<<<4 * multiprocessors, 512, 0, stream>>>(static_cast<const uint4*>(scratch), bytes / 16,
                                                                   0x9e3779b9u, static_cast<uint32_t*>(scratch));
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_prefetch_l2(const PrefetchRanges& ranges, int parts, cudaStream_t stream) {
  if (ranges.total() <= 0 || parts <= 0) return;
  launch_after(prefetch_l2_kernel, dim3(parts), dim3(32), 0, stream, ranges);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::backend::cuda
