// A kernel of its own that warms L2 with a later kernel's weight
// (l2_prefetch.cuh says why): for products whose kernels take no prefetch
// themselves (the 4-bit ones). Launched after the product, before the op that
// reads little memory; it issues its prefetches, then waits for the product,
// so the kernels after it still find the product's results. And the
// opposite: a read of scratch that evicts what L2 holds, for timing a
// kernel as a decode step meets it (cold_timing.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::backend::cuda {

// Up to two address ranges warmed as one, in this order: [base[i], base[i] +
// bytes[i]), each a multiple of 16 bytes, 16-byte aligned.
struct PrefetchRanges {
  const char* base[2] = {nullptr, nullptr};
  int64_t bytes[2] = {0, 0};
  int64_t total() const { return bytes[0] + bytes[1]; }
};

// The ranges into L2 by `parts` warps, each one slice.
void launch_prefetch_l2(const PrefetchRanges& ranges, int parts, cudaStream_t stream);

// Reads `bytes` (a multiple of 16) of device scratch through L2, evicting
// what L2 held where the scratch is larger (cold_timing.h); may write the
// scratch's first word.
void launch_read_through_l2(void* scratch, int64_t bytes, int multiprocessors, cudaStream_t stream);

}  // namespace tessera::backend::cuda
