// Tensor-core W4A16 for sm_80 and newer (16-bit activations). The scalar
// GEMV of w4a16.cu dequantizes every weight once per activation row in
// integer and float instructions, so its cost grows with the rows; here the
// products go to mma.sync, which takes 8 token rows at once, and a weight is
// dequantized once for all of them (on the H200: 16 rows 2.7x the scalar
// GEMV's tokens/s; one row about the same, both bound by load latency).
//
// The weights are repacked at upload into the operand order of
// mma.m16n8k16 (A = 16 weight rows x 16 inputs, B = 16 inputs x 8 tokens):
// a warp owns 16 output rows, and for every 64-input chunk each lane loads one
// 16-byte word that holds exactly its A fragments of four k-steps. Lane
// (g = lane / 4, t = lane % 4) holds rows g and g + 8. Inside a chunk the
// inputs are permuted, the same way for A and B, so that the lane's B values
// are 16 consecutive activations (two 16-byte loads):
//   k-step s, mma row κ of lane t  <->  input 64c + 16t + 4s + j,
//   κ = 2t, 2t + 1, 2t + 8, 2t + 9  for  j = 0, 1, 2, 3.
// Word s of the lane packs its four A registers as nibble pairs (r, r + 4):
//   register 0 = rows g,     j 0-1: nibbles 0 and 4
//   register 1 = rows g + 8, j 0-1: nibbles 1 and 5
//   register 2 = rows g,     j 2-3: nibbles 2 and 6
//   register 3 = rows g + 8, j 2-3: nibbles 3 and 7
// so (word >> 4r) & 0x000F000F | magic is register r as two 16-bit numbers
// magic + q (magic 128 for bf16, 1024 for fp16, whose ulp is 1), and one
// packed subtraction of magic + zero leaves q - zero, exact in either type.
// The scale is applied to the f32 mma result per chunk, so no weight is
// rounded to 16 bits (dequantize + GEMM rounds each one). (Feeding magic + q
// to the mma and taking the offset out with a second mma against ones, which
// saves the subtraction, measured slower on the H200: 8 % at one row.)
//
// Scales and zeros are repacked too, one u32 per (group, row): the scale's
// f16 bits low, the zero in bits 16..19, rows contiguous.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/w4_mma.cuh"
#include "backend/cuda/w4a16.h"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

using namespace w4;  // NOLINT: the shared kernel helpers

// 16-byte weight loads a lane issues before it computes: 4 at one tile of
// tokens (fewer registers: three blocks an SM, and measured 5-8 % faster than
// 8 on the H200), 8 at two tiles, 4 for more tokens, whose accumulators need
// the registers.
template <int NT>
__host__ __device__ constexpr int loads_in_flight() {
  return NT == 2 ? 8 : 4;
}

// x [m, k], tiles uint4 [n_pad / 16][k / 64][32 lanes], scale_zero u32
// [k / g][n_pad], out [m, n]. NT tiles of 8 tokens (m <= 8 NT); RW warps of a
// block take consecutive row tiles and share their activations through L1,
// the other kWarps / RW split the chunks, meeting in shared memory.
// kDouble: two batches in registers, the next loading while the current is
// computed (more registers, so fewer blocks an SM: for long inputs, whose
// few row tiles leave the SMs room, e.g. the down projection).
template <typename T, int NT, int RW, bool kDouble>
__global__ void __launch_bounds__(kWarps * 32, NT == 1 && !kDouble ? 3 : 1)  // 3 blocks an SM: at most 85 registers
    w4a16_mma_kernel(const T* __restrict__ x, const uint4* __restrict__ tiles, const uint32_t* __restrict__ scale_zero,
                     const T* __restrict__ bias, int m, int n, int n_pad, int k, int group_shift,
                     T* __restrict__ out, bool accumulate, W4Store store, W4Norms norms, bool early) {
  constexpr int KW = kWarps / RW, kLoadsInFlight = loads_in_flight<NT>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rw = warp % RW, kw = warp / RW;
  const int row_tiles = n_pad / 16, chunks = k / kChunkInputs;
  const int tile = min(int(blockIdx.x) * RW + rw, row_tiles - 1);  // past the end: repeats the last, never stored
  const int g = lane / 4;
  const int row = tile * 16 + g;
  const uint4* weights = tiles + int64_t(tile) * chunks * 32 + lane;

  struct Batch {
    uint4 w[kLoadsInFlight];
    uint32_t sz_g[kLoadsInFlight], sz_g8[kLoadsInFlight];
  };
  auto load_batch = [&](Batch& b, int c0) {
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int c = c0 + u * KW;
      if (c < chunks) {
        b.w[u] = __ldcs(weights + int64_t(c) * 32);  // read once: do not keep it in L1
        const int64_t group = c >> group_shift;
        b.sz_g[u] = __ldg(scale_zero + group * n_pad + row);
        b.sz_g8[u] = __ldg(scale_zero + group * n_pad + row + 8);
      }
    }
  };
  float acc[NT][4];
#pragma unroll
  for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  auto compute_batch = [&](const Batch& b, int c0) {
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int c = c0 + u * KW;
      if (c >= chunks) break;
      chunk_product<T, NT>(acc, b.w[u], b.sz_g[u], b.sz_g8[u], x, m, k, c, lane);
    }
  };
  constexpr int kBatchChunks = KW * kLoadsInFlight;  // chunks of the matrix a batch of the block covers
  // No kernel writes the weights: with `early` the first batch is in flight
  // while the previous kernel finishes.
  Batch current;
  if (early) load_batch(current, kw);
  wait_for_previous_kernel();
  if (!early) load_batch(current, kw);
  __shared__ NormShared<NT, RW> norm_shared;
  inverse_rms<kWarps>(norms, m, k, norm_shared.inv_rms);
  if constexpr (kDouble) {
    Batch next;
    int c0 = kw;
    for (; c0 + kBatchChunks < chunks; c0 += 2 * kBatchChunks) {
      load_batch(next, c0 + kBatchChunks);
      compute_batch(current, c0);
      if (c0 + 2 * kBatchChunks < chunks) load_batch(current, c0 + 2 * kBatchChunks);
      compute_batch(next, c0 + kBatchChunks);
    }
    if (c0 < chunks) compute_batch(current, c0);
  } else {
    for (int c0 = kw; c0 < chunks; c0 += kBatchChunks) {
      compute_batch(current, c0);
      if (c0 + kBatchChunks < chunks) load_batch(current, c0 + kBatchChunks);
    }
  }
  if (early) allow_next_kernel();  // the weights are read: the next kernel may load its own

  __shared__ float partial[KW][RW][NT * 4][32];
  reduce_and_store<T, NT, RW>(partial, acc, bias, m, n, row_tiles, out, accumulate, store, norms, norm_shared);
}

// The same product with the weights streamed through shared memory by
// cp.async (sm_80 and newer), kStages stages of kStageChunks chunks ahead.
// The batch-load kernel above (one batch at a time) holds its loads in
// registers and computes only once a whole batch has arrived, so each warp's
// bytes in flight drop to zero while it computes; and a register ring of
// loads consumed one by one lost to it (the hardware tracks few outstanding
// loads per warp, so the waits merge).
// Copies into shared memory complete in groups the thread waits on, so a
// warp keeps (kStages - 1) stages in flight all the time, in no registers.
// Every lane reads back only what it copied itself: no barrier but the
// thread's own cp.async.wait_group. Measured on the H200: no faster at one
// row (the batch kernel wins each shape's timing there), a few per cent at 16
// and 64 rows. What held the 4-bit GEMVs well below the copy bandwidth was
// the per-chunk work (with the same loads and no product they took half the
// time); the instructions a chunk have been cut by a third since
// (BENCHMARKS.md), and the timing still keeps the register kernels at one row.
constexpr int kStages = 4, kStageChunks = 2;

template <int NT>
constexpr size_t async_shared_bytes() {
  const size_t staged = size_t(kStages) * kStageChunks * kWarps * 32 * (sizeof(uint4) + sizeof(uint2));
  // the partial sums, then the norms' (the most of any row warps)
  const size_t partial = size_t(kWarps) * NT * 4 * 32 * sizeof(float) + sizeof(NormShared<NT, kWarps>);
  return staged > partial ? staged : partial;
}

// Layout and arguments as w4a16_mma_kernel; the warp's chunks are
// kw + KW j, stage j / kStageChunks. With `early` the first stages are
// copied before the wait (no kernel writes the weights).
template <typename T, int NT, int RW>
__global__ void __launch_bounds__(kWarps * 32)
    w4a16_async_kernel(const T* __restrict__ x, const uint4* __restrict__ tiles,
                       const uint32_t* __restrict__ scale_zero, const T* __restrict__ bias, int m, int n, int n_pad,
                       int k, int group_shift, T* __restrict__ out, bool accumulate, W4Store store, W4Norms norms,
                       bool early) {
  constexpr int KW = kWarps / RW;
  extern __shared__ uint4 shared_words[];
  uint4 (*staged_w)[kStageChunks][kWarps][32] = reinterpret_cast<uint4 (*)[kStageChunks][kWarps][32]>(shared_words);
  uint2 (*staged_sz)[kStageChunks][kWarps][32] = reinterpret_cast<uint2 (*)[kStageChunks][kWarps][32]>(
      shared_words + kStages * kStageChunks * kWarps * 32);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rw = warp % RW, kw = warp / RW;
  const int row_tiles = n_pad / 16, chunks = k / kChunkInputs;
  const int tile = min(int(blockIdx.x) * RW + rw, row_tiles - 1);  // past the end: repeats the last, never stored
  const int row = tile * 16 + lane / 4;
  const uint4* weights = tiles + int64_t(tile) * chunks * 32 + lane;
  const int my_chunks = chunks > kw ? (chunks - kw + KW - 1) / KW : 0;
  const int stages = (my_chunks + kStageChunks - 1) / kStageChunks;
  const uint64_t policy = evict_first_policy();

  auto issue = [&](int stage) {
    if (stage < stages) {
#pragma unroll
      for (int u = 0; u < kStageChunks; ++u) {
        const int j = stage * kStageChunks + u;
        if (j < my_chunks) {
          const int c = kw + j * KW;
          const int64_t group = c >> group_shift;
          const int slot = stage % kStages;
          cp_async_16_hint(shared_address(&staged_w[slot][u][warp][lane]), weights + int64_t(c) * 32, policy);
          cp_async_4(shared_address(&staged_sz[slot][u][warp][lane].x), scale_zero + group * n_pad + row);
          cp_async_4(shared_address(&staged_sz[slot][u][warp][lane].y), scale_zero + group * n_pad + row + 8);
        }
      }
    }
    cp_async_commit();  // empty past the end: keeps one group per stage
  };

  if (early) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);
    wait_for_previous_kernel();
  } else {
    wait_for_previous_kernel();
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);
  }

  float acc[NT][4];
#pragma unroll
  for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  for (int stage = 0; stage < stages; ++stage) {
    cp_async_wait<kStages - 2>();  // this stage's group has landed
    issue(stage + kStages - 1);  // into the slot read one stage ago
    const int slot = stage % kStages;
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u) {
      const int j = stage * kStageChunks + u;
      if (j >= my_chunks) break;
      const uint2 sz = staged_sz[slot][u][warp][lane];
      chunk_product<T, NT>(acc, staged_w[slot][u][warp][lane], sz.x, sz.y, x, m, k, kw + j * KW, lane);
    }
  }
  if (early) allow_next_kernel();  // the weights are read: the next kernel may take the room
  cp_async_wait<0>();
  // The staging space becomes the partial sums and the norms' shared memory
  // (the stages fill the 48 KB a launch gets without opting in).
  __syncthreads();
  auto& partial = *reinterpret_cast<float (*)[KW][RW][NT * 4][32]>(shared_words);
  auto& norm_shared = *reinterpret_cast<NormShared<NT, RW>*>(&partial + 1);
  inverse_rms<kWarps>(norms, m, k, norm_shared.inv_rms);
  reduce_and_store<T, NT, RW>(partial, acc, bias, m, n, row_tiles, out, accumulate, store, norms, norm_shared);
}

// Canonical nibble of weight (tile row o, input i); 0 past the last row.
__device__ __forceinline__ uint32_t canonical_nibble(const uint32_t* qweight, int64_t n, int64_t k, int64_t o,
                                                     int64_t i, bool paired) {
  if (o >= n) return 0;
  if (paired) o = paired_row(o, n);
  return (qweight[o * (k / 8) + i / 8] >> (4 * (i % 8))) & 0xFu;
}

// One thread per tiled u32: word s of lane (g, t) of chunk c of row tile p.
__global__ void w4_tile_kernel(const uint32_t* qweight, int64_t n, int64_t k, uint32_t* tiles, bool paired) {
  const int64_t chunks = k / kChunkInputs, total = (n + 15) / 16 * chunks * 128;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int s = idx % 4, lane = (idx / 4) % 32;
    const int64_t c = (idx / 128) % chunks, p = idx / (128 * chunks);
    const int64_t row_g = p * 16 + lane / 4, base = c * kChunkInputs + (lane % 4) * 16 + s * 4;
    uint32_t word = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t o = r % 2 == 0 ? row_g : row_g + 8, j = r < 2 ? 0 : 2;
      word |= canonical_nibble(qweight, n, k, o, base + j, paired) << (4 * r);
      word |= canonical_nibble(qweight, n, k, o, base + j + 1, paired) << (4 * (r + 4));
    }
    tiles[idx] = word;
  }
}

__global__ void w4_scale_zero_kernel(const __half* scales, const uint8_t* zeros, int64_t n, int64_t n_pad,
                                     int64_t groups, uint32_t* scale_zero, bool paired) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < groups * n_pad;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t group = idx / n_pad, r = idx % n_pad, o = paired ? paired_row(r, n) : r;
    uint32_t v = 0;  // rows past n: scale 0
    if (r < n) v = __half_as_ushort(scales[o * groups + group]) | (uint32_t(zeros[o * groups + group]) << 16);
    scale_zero[idx] = v;
  }
}

// One thread per lane word of a chunk: its 16 inputs of rows g and g + 8.
template <typename T>
__global__ void w4_dequantize_tiles_kernel(const uint4* tiles, const uint32_t* scale_zero, int64_t n, int64_t k,
                                           int64_t group_size, T* w, bool paired) {
  struct alignas(16) Sixteen {
    T v[16];
  };
  const int64_t chunks = k / kChunkInputs, n_pad = (n + 15) / 16 * 16, total = n_pad / 16 * chunks * 32;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int lane = idx % 32;
    const int64_t c = (idx / 32) % chunks, p = idx / (32 * chunks);
    const int64_t base = c * kChunkInputs + (lane % 4) * 16, group = base / group_size;
    const uint4 packed = tiles[idx];
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // row g, then row g + 8
      const int64_t r = p * 16 + lane / 4 + 8 * half;  // the tile row
      if (r >= n) continue;
      const int64_t o = paired ? paired_row(r, n) : r;  // the canonical row
      const uint32_t sz = scale_zero[group * n_pad + r];
      const float scale = __half2float(__ushort_as_half(static_cast<unsigned short>(sz & 0xFFFFu)));
      const float zero = static_cast<float>(sz >> 16);
      Sixteen row;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // input base + 4s + j: register half + 2 (j / 2), nibble + 4 (j % 2)
          const int nibble = half + 2 * (j / 2) + 4 * (j % 2);
          row.v[4 * s + j] = from_float<T>((static_cast<float>((words[s] >> (4 * nibble)) & 0xFu) - zero) * scale);
        }
      }
      uint4* dst = reinterpret_cast<uint4*>(w + o * k + base);
      dst[0] = reinterpret_cast<const uint4*>(row.v)[0];
      dst[1] = reinterpret_cast<const uint4*>(row.v)[1];
    }
  }
}

int grid_for(int64_t items, int threads) {
  return static_cast<int>(std::min<int64_t>((items + threads - 1) / threads, 65535 * 16));
}

template <typename T, int NT>
void launch_nt(const T* x, const uint4* tiles, const uint32_t* scale_zero, const T* bias, int m, int n, int k,
               int group_size, int row_warps, W4Pipeline pipeline, T* out, cudaStream_t stream, bool accumulate,
               W4Store store, const W4Norms& norms) {
  const int n_pad = (n + 15) / 16 * 16, row_tiles = n_pad / 16;
  int group_shift = 0;  // chunks of a group: a power of two (w4_tiles_supported)
  while ((kChunkInputs << group_shift) < group_size) ++group_shift;
  const unsigned blocks = static_cast<unsigned>((row_tiles + row_warps - 1) / row_warps);
  constexpr size_t shared = async_shared_bytes<NT>();
  static_assert(shared <= 48 * 1024, "more than the dynamic shared memory a launch gets without opting in");
  const bool early = early_successor_launch() && programmatic_launch_enabled();
#define TESSERA_W4_MMA(RW)                                                                                 \
  if (pipeline == W4Pipeline::kSharedStages) {                                                             \
    launch_after(w4a16_async_kernel<T, NT, RW>, blocks, kWarps * 32, shared, stream, x, tiles, scale_zero, \
                 bias, m, n, n_pad, k, group_shift, out, accumulate, store, norms, early);                        \
  } else if (pipeline == W4Pipeline::kRegisterDouble) {                                                    \
    launch_after(w4a16_mma_kernel<T, NT, RW, true>, blocks, kWarps * 32, 0, stream, x, tiles, scale_zero,  \
                 bias, m, n, n_pad, k, group_shift, out, accumulate, store, norms, early);                        \
  } else {                                                                                                 \
    launch_after(w4a16_mma_kernel<T, NT, RW, false>, blocks, kWarps * 32, 0, stream, x, tiles, scale_zero, \
                 bias, m, n, n_pad, k, group_shift, out, accumulate, store, norms, early);                        \
  }
  switch (row_warps) {
    case 1: TESSERA_W4_MMA(1); break;
    case 2: TESSERA_W4_MMA(2); break;
    case 4: TESSERA_W4_MMA(4); break;
    default: TESSERA_W4_MMA(8); break;
  }
#undef TESSERA_W4_MMA
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void check_w4_store(W4Store store, int64_t m, int64_t n, bool accumulate, const W4Norms& norms, const char* what) {
  if (store != W4Store::kRows && !w4_pairs_supported(n)) {
    throw Error(ErrorKind::kInternal, std::string(what) + ": paired rows need a multiple of 16 rows, not " +
                                          std::to_string(n));
  }
  if (store == W4Store::kSiluMul && accumulate) {
    throw Error(ErrorKind::kInternal, std::string(what) + ": a SiLU·mul store adds into nothing");
  }
  const bool ahead = norms.ahead_weight != nullptr || norms.ahead_formed != nullptr || norms.ahead_sums != nullptr;
  if ((ahead || norms.input_sums != nullptr) && m > kW4NormRows) {
    throw Error(ErrorKind::kInternal, std::string(what) + ": RMSNorm in the store at " + std::to_string(m) +
                                          " rows (up to " + std::to_string(kW4NormRows) + ")");
  }
  if (ahead && (norms.ahead_weight == nullptr || norms.ahead_formed == nullptr || norms.ahead_sums == nullptr ||
                store != W4Store::kRows || !accumulate || n % 16 != 0)) {
    throw Error(ErrorKind::kInternal, std::string(what) +
                                          ": an ahead norm needs its weight, formed and sums, plain rows (a multiple "
                                          "of 16) and a sum into the residual");
  }
}

bool w4_tiles_supported(int64_t k, int64_t group_size) {
  const int64_t chunks_per_group = group_size / kChunkInputs;
  // A power of two of chunks per group: the kernels find a chunk's group by a shift.
  return k > 0 && k % kChunkInputs == 0 && group_size % kChunkInputs == 0 && k % group_size == 0 &&
         (chunks_per_group & (chunks_per_group - 1)) == 0;
}

int64_t w4_tile_words(int64_t n, int64_t k) { return (n + 15) / 16 * 16 * (k / 8); }
int64_t w4_scale_zero_words(int64_t n, int64_t k, int64_t group_size) { return (n + 15) / 16 * 16 * (k / group_size); }

void launch_w4_tile(const uint32_t* qweight, const __half* scales, const uint8_t* zeros, int64_t n, int64_t k,
                    int64_t group_size, uint32_t* tiles, uint32_t* scale_zero, cudaStream_t stream, bool paired) {
  if (paired && !w4_pairs_supported(n)) {
    throw Error(ErrorKind::kInternal, "launch_w4_tile: paired tiles need a multiple of 16 rows, not " + std::to_string(n));
  }
  const int64_t n_pad = (n + 15) / 16 * 16, groups = k / group_size;
  w4_tile_kernel<<<grid_for(w4_tile_words(n, k), 256), 256, 0, stream>>>(qweight, n, k, tiles, paired);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  w4_scale_zero_kernel<<<grid_for(groups * n_pad, 256), 256, 0, stream>>>(scales, zeros, n, n_pad, groups,
                                                                         scale_zero, paired);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_w4a16_mma(const T* x, const uint32_t* tiles, const uint32_t* scale_zero, const T* bias, int64_t m,
                      int64_t n, int64_t k, int64_t group_size, int row_warps, W4Pipeline pipeline, T* out,
                      cudaStream_t stream, bool accumulate, W4Store store, const W4Norms& norms) {
  if (m <= 0 || n <= 0) return;
  check_w4_store(store, m, n, accumulate, norms, "launch_w4a16_mma");
  if (pipeline == W4Pipeline::kGroupSums || pipeline == W4Pipeline::kWideRows) {
    throw Error(ErrorKind::kInternal,
                "launch_w4a16_mma: the group-sum and wide-row kernels launch by launch_w4a16_group_sums and "
                "launch_w4a16_wide");
  }
  const auto* t = reinterpret_cast<const uint4*>(tiles);
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k),
            g = static_cast<int>(group_size);
  if (m <= 8) {
    return launch_nt<T, 1>(x, t, scale_zero, bias, im, in, ik, g, row_warps, pipeline, out, stream, accumulate, store,
                         norms);
  }
  if (m <= 16) {
    return launch_nt<T, 2>(x, t, scale_zero, bias, im, in, ik, g, row_warps, pipeline, out, stream, accumulate, store,
                         norms);
  }
  if (m <= 32) {
    return launch_nt<T, 4>(x, t, scale_zero, bias, im, in, ik, g, row_warps, pipeline, out, stream, accumulate, store,
                         norms);
  }
  return launch_nt<T, 8>(x, t, scale_zero, bias, im, in, ik, g, row_warps, pipeline, out, stream, accumulate, store,
                         norms);
}

template <typename T>
void launch_w4_dequantize_tiles(const uint32_t* tiles, const uint32_t* scale_zero, int64_t n, int64_t k,
                                int64_t group_size, T* w, cudaStream_t stream, bool paired) {
  const int64_t lane_words = (n + 15) / 16 * (k / kChunkInputs) * 32;
  w4_dequantize_tiles_kernel<T><<<grid_for(lane_words, 256), 256, 0, stream>>>(
      reinterpret_cast<const uint4*>(tiles), scale_zero, n, k, group_size, w, paired);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

#define INSTANTIATE(T)                                                                                            \
  template void launch_w4a16_mma<T>(const T*, const uint32_t*, const uint32_t*, const T*, int64_t, int64_t,     \
                                    int64_t, int64_t, int, W4Pipeline, T*, cudaStream_t, bool, W4Store,        \
                                    const W4Norms&);\
  template void launch_w4_dequantize_tiles<T>(const uint32_t*, const uint32_t*, int64_t, int64_t, int64_t, T*, \
                                              cudaStream_t, bool);
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
