// The custom collectives' kernels: plain launchers over peer-mapped buffers of
// the ranks of one process (different GPUs with peer access, or one GPU).
//
// Each rank owns, on its device, a staging buffer `data` (a collective's input
// is copied there first), a buffer `tmp` (two-shot's reduced part) and a
// Signal (barrier flags). Every rank holds the pointers of all of them
// (PeerBuffers) and launches the same kernel with the same grid; block b of
// each rank meets block b of every other rank at a barrier:
//   one-shot   barrier; out[i] = Σ_{g=0..n-1} data[g][i]; barrier
//   two-shot   barrier; tmp[r][j] = Σ_g data[g][r·part + j] (reduce-scatter);
//              barrier; out[g·part + j] = tmp[g][j] (all-gather); barrier
//   gather     barrier; out[g·stride ..] = data[g][0, bytes); barrier
//   broadcast  barrier; out = data[root][0, bytes); barrier
//   barrier    barrier
// The sum runs over ranks 0..n-1 in that order in f32 and is rounded once, in
// both algorithms, so every rank gets the same bits, whichever algorithm ran.
// Block b of a two-shot writes and later reads the same relative indices on
// every rank, so its per-block barriers order exactly the data it exchanges.
// The closing barrier keeps a rank from overwriting its buffers while a slow
// peer still reads them.
//
// Barrier flags: a per-block epoch in the rank's own Signal, bumped once per
// kernel, so nothing is ever reset and kernels may be captured in CUDA graphs.
// A barrier spins on a release/acquire flag at system scope; it leaves early,
// writing `status`, when `abort` is raised (a rank failed) or a peer has not
// arrived within `timeout_ns` — a failed group never hangs a GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera::comm::cuda {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxBlocks = 36;  // per rank and kernel; small so the ranks of one GPU co-reside

struct Signal {
  uint32_t flags[3][kMaxBlocks][kMaxRanks];  // [phase: start, middle, end][block][from rank]
  uint32_t epoch[kMaxBlocks];                // last flag value this rank's block used
};

struct PeerBuffers {
  void* data[kMaxRanks] = {};
  void* tmp[kMaxRanks] = {};
  Signal* signal[kMaxRanks] = {};
};

// status values written by a kernel
inline constexpr int kStatusOk = 0;
inline constexpr int kStatusAborted = 1;
inline constexpr int kStatusTimedOut = 2;

struct SyncControl {
  const volatile int* abort = nullptr;  // host-mapped: nonzero once a rank failed
  volatile int* status = nullptr;       // host-mapped: a kernel that left early writes why
  unsigned long long timeout_ns = 0;
  int max_blocks = kMaxBlocks;          // grid cap (≤ kMaxBlocks), the same on every rank
};

enum class ElementType { kF32, kF16, kBF16 };

// out [count] = Σ over ranks of data[g][0, count), elements of `type`.
// `two_shot`: reduce-scatter + all-gather instead of every rank reading all.
void launch_all_reduce(const PeerBuffers& peers, int rank, int world, ElementType type, int64_t count, void* out,
                       bool two_shot, const SyncControl& control, cudaStream_t stream);

// out + g·out_stride_bytes receives data[g][0, bytes) for every rank g.
void launch_gather(const PeerBuffers& peers, int rank, int world, size_t bytes, void* out, size_t out_stride_bytes,
                   const SyncControl& control, cudaStream_t stream);

// out receives data[root][0, bytes).
void launch_broadcast(const PeerBuffers& peers, int rank, int world, int root, size_t bytes, void* out,
                      const SyncControl& control, cudaStream_t stream);

// Returns (on the stream) once every rank's barrier kernel has started.
void launch_barrier(const PeerBuffers& peers, int rank, int world, const SyncControl& control, cudaStream_t stream);

}  // namespace tessera::comm::cuda
