// Warming the L2 cache with weights a later kernel reads.
//
// At batch 1 decode attention reads a few hundred KB while the weights after
// it (the o projection, 32 MB for a 7B shape in bf16, then gate_up) wait in
// DRAM, so for those microseconds the memory system idles. The kernel before
// attention issues prefetches of as much of them as L2 holds once its own
// loads are done; attention runs beside them, and the products after it read
// their first bytes from L2. On sm_90 one
// bulk prefetch a 16 KB piece (the copy engine moves it; no register holds it);
// before that, a prefetch instruction a 128-byte line.
#pragma once

#include <cstdint>

#include "backend/cuda/l2_prefetch.h"

namespace tessera::backend::cuda {

__device__ __forceinline__ void prefetch_l2_range(const char* base, int64_t size, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int64_t kPiece = 16 * 1024;  // a bulk prefetch each, the lanes' pieces in turn
  for (int64_t offset = int64_t(lane) * kPiece; offset < size; offset += 32 * kPiece) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + offset),
                 "r"(static_cast<uint32_t>(min(kPiece, size - offset)))
                 : "memory");
  }
#else
  for (int64_t offset = int64_t(lane) * 128; offset < size; offset += 32 * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + offset));
  }
#endif
}

// Part `part` of `parts` equal slices (whole 128-byte lines) of the ranges
// laid end to end. Called by every lane of a warp.
__device__ __forceinline__ void prefetch_l2_slice(const PrefetchRanges& ranges, int64_t part, int64_t parts,
                                                  int lane) {
  const int64_t total = ranges.bytes[0] + ranges.bytes[1];
  if (total <= 0 || part >= parts) return;
  const int64_t slice = ((total + parts - 1) / parts + 127) / 128 * 128;
  const int64_t begin = part * slice, end = min(begin + slice, total);
  if (begin >= end) return;
  const int64_t first = ranges.bytes[0];
  if (begin < first) prefetch_l2_range(ranges.base[0] + begin, min(end, first) - begin, lane);
  if (end > first) {
    const int64_t from = max(begin, first);
    prefetch_l2_range(ranges.base[1] + (from - first), end - from, lane);
  }
}

}  // namespace tessera::backend::cuda
