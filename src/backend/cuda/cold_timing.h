// Timing a kernel as a decode step meets it: its weights not in L2.
//
// A step reads each layer's weights once, so a decode product always starts
// from DRAM; a candidate timed in a loop over the same weights finds the
// ones that fit in L2 (the 7B shape's o and qkv projections, and every 4-bit
// one but gate_up) still there from the call before, and the fastest kernel
// from L2 need not be the fastest from DRAM. Before each timed call the
// timer reads a scratch of twice the L2 size, which evicts them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

#include "core/buffer.h"
#include "core/tensor.h"

namespace tessera::backend::cuda {

// Seconds per call of fn (which only enqueues work on `stream`): one call to
// warm up, then `repeats` calls back to back between two events, as a loop
// meets them (what one call leaves in L2 the next finds there).
double seconds_per_call_back_to_back(cudaStream_t stream, const std::function<void()>& fn, int repeats);

class ColdTimer {
 public:
  // Allocates the scratch (twice the L2 size: 100 MB on an H100 or H200, 8
  // MB on a T4) here, once: the timings run at a shape's first call, which
  // may fall between the collectives of ranks sharing a GPU, where nothing
  // may be allocated. Without room for it, or with TESSERA_COLD_TIMING=0,
  // it times back to back (seconds_per_call_back_to_back).
  ColdTimer(cudaStream_t stream, Allocator& allocator, int device);

  // Seconds per call of fn (which only enqueues work on the stream): one
  // call to warm up (plans, instruction cache), then `repeats` calls, each
  // after the scratch read and timed alone between two events.
  double seconds_per_call(const std::function<void()>& fn, int repeats);

 private:
  cudaStream_t stream_;
  Tensor scratch_;  // undefined: back to back
  int multiprocessors_ = 1;
};

}  // namespace tessera::backend::cuda
