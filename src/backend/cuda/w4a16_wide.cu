// The tensor-core W4A16 product with several row tiles a warp: for decode
// batches of many tokens (up to kW4MmaMaxRows), on the tiles of
// w4a16_tiles.cu (its comment describes the operand layout).
//
// Why a kernel of its own: in w4a16_mma_kernel a warp owns one 16-row tile,
// so every 16-byte weight word it loads is multiplied with activations it
// reads from L1, 32 bytes a lane for each 8-token tile. At 64 tokens that is
// 256 bytes of activations for every 16 of weights, and the 4-bit step at 64
// rows was slower than bf16's. Here a warp owns RT neighbouring row tiles and
// loads each chunk of activations once for all of them, which divides those
// reads by RT; the price is RT times the accumulators (RT x NT x 4 a lane).
// RT = 2 is what runs: on an H100 (BENCHMARKS.md) it took the 64-row
// products 15-25 % below the best one-tile kernel, and neither RT = 4 (up to
// 32 rows), nor the weights through four cp.async stages in shared memory
// (bytes in flight while a chunk is computed), nor the tokens split over two
// warps loading the same weights (half the accumulators, two blocks an SM)
// won a shape. At 64 rows it runs one block an SM (255 registers), two warps
// a scheduler, and the weights' stream is far from busy: more warps than
// these registers allow, or wgmma, is what would feed it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/w4_mma.cuh"
#include "backend/cuda/w4a16.h"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

using namespace w4;  // NOLINT: the shared kernel helpers

constexpr int kLoads = 2;     // chunks a warp loads before it computes them (RT words each)
constexpr int kRowTiles = 2;  // RT of the launched kernels

// x [m, k], tiles uint4 [n_pad / 16][k / 64][32 lanes], scale_zero u32
// [k / g][n_pad], out [m, n]. NT tiles of 8 tokens (m <= 8 NT). The block's
// kWarps warps: RW of them on neighbouring runs of RT row tiles, the other
// KW = kWarps / RW split the chunks (warp kw takes kw, kw + KW, ...) and meet
// in shared memory. The weights arrive in batches of kLoads chunks held in
// registers, a batch computed once it has arrived.
template <typename T, int NT, int RT, int RW>
__global__ void __launch_bounds__(kWarps * 32, NT * RT <= 4 ? 2 : 1)  // 2 blocks an SM: at most 128 registers
    w4a16_wide_kernel(const T* __restrict__ x, const uint4* __restrict__ tiles,
                      const uint32_t* __restrict__ scale_zero, const T* __restrict__ bias, int m, int n, int n_pad,
                      int k, int group_shift, T* __restrict__ out, bool accumulate, W4Store store, W4Norms norms,
                      bool early) {
  constexpr int KW = kWarps / RW;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rw = warp % RW, kw = warp / RW;
  const int row_tiles = n_pad / 16, chunks = k / kChunkInputs;
  const int first_tile = (int(blockIdx.x) * RW + rw) * RT;
  const uint4* weights[RT];  // the lane's A fragments of chunk 0 of each row tile
  int row[RT];               // and its row g there
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const int tile = min(first_tile + r, row_tiles - 1);  // past the end: repeats the last, never stored
    weights[r] = tiles + int64_t(tile) * chunks * 32 + lane;
    row[r] = tile * 16 + lane / 4;
  }

  struct Batch {
    uint4 w[kLoads][RT];
    uint32_t sz_g[kLoads][RT], sz_g8[kLoads][RT];
  };
  auto load_batch = [&](Batch& b, int c0) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = c0 + u * KW;
      if (c < chunks) {
        const int64_t group = c >> group_shift;
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          b.w[u][r] = __ldcs(weights[r] + int64_t(c) * 32);  // read once: do not keep it in L1
          b.sz_g[u][r] = __ldg(scale_zero + group * n_pad + row[r]);
          b.sz_g8[u][r] = __ldg(scale_zero + group * n_pad + row[r] + 8);
        }
      }
    }
  };

  float acc[RT][NT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int i = 0; i < NT; ++i) acc[r][i][0] = acc[r][i][1] = acc[r][i][2] = acc[r][i][3] = 0.0f;
  }
  // No kernel writes the weights: with `early` the first batch is in flight
  // while the previous kernel finishes.
  Batch current;
  if (early) load_batch(current, kw);
  wait_for_previous_kernel();
  if (!early) load_batch(current, kw);
  __shared__ NormShared<NT, RW> norm_shared;
  inverse_rms<kWarps>(norms, m, k, norm_shared.inv_rms);
  constexpr int kBatchChunks = KW * kLoads;  // chunks of the matrix a batch of the block covers
  for (int c0 = kw; c0 < chunks; c0 += kBatchChunks) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = c0 + u * KW;
      if (c >= chunks) break;
      chunk_product<T, NT, RT>(acc, current.w[u], current.sz_g[u], current.sz_g8[u], x, m, k, c, lane);
    }
    if (c0 + kBatchChunks < chunks) load_batch(current, c0 + kBatchChunks);
  }
  if (early) allow_next_kernel();  // the weights are read: the next kernel may load its own

  __shared__ float partial[KW][RW][NT * 4][32];
  reduce_and_store<T, NT, RW, RT>(partial, acc, bias, m, n, row_tiles, out, accumulate, store, norms, norm_shared);
}

template <typename T, int NT>
void launch_nt(const T* x, const uint4* tiles, const uint32_t* scale_zero, const T* bias, int m, int n, int k,
               int group_size, int row_warps, T* out, cudaStream_t stream, bool accumulate, W4Store store,
               const W4Norms& norms) {
  const int n_pad = (n + 15) / 16 * 16, row_tiles = n_pad / 16;
  int group_shift = 0;  // chunks of a group: a power of two (w4_tiles_supported)
  while ((kChunkInputs << group_shift) < group_size) ++group_shift;
  const unsigned blocks = static_cast<unsigned>((row_tiles + row_warps * kRowTiles - 1) / (row_warps * kRowTiles));
  const bool early = early_successor_launch() && programmatic_launch_enabled();
  auto launch = [&](auto kernel) {
    launch_after(kernel, blocks, kWarps * 32, 0, stream, x, tiles, scale_zero, bias, m, n, n_pad, k, group_shift,
                 out, accumulate, store, norms, early);
  };
  if (row_warps == 1) {
    launch(w4a16_wide_kernel<T, NT, kRowTiles, 1>);
  } else {
    launch(w4a16_wide_kernel<T, NT, kRowTiles, 2>);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool w4_wide_supported(int64_t m, int row_warps) {
  return m >= 1 && m <= kW4MmaMaxRows && (row_warps == 1 || row_warps == 2);
}

template <typename T>
void launch_w4a16_wide(const T* x, const uint32_t* tiles, const uint32_t* scale_zero, const T* bias, int64_t m,
                       int64_t n, int64_t k, int64_t group_size, int row_warps, T* out, cudaStream_t stream,
                       bool accumulate, W4Store store, const W4Norms& norms) {
  if (!w4_wide_supported(m, row_warps) || !w4_tiles_supported(k, group_size)) {
    throw Error(ErrorKind::kInternal, "w4a16 wide: no kernel for m " + std::to_string(m) + ", " +
                                          std::to_string(row_warps) + " row warps, k " + std::to_string(k) +
                                          ", group " + std::to_string(group_size));
  }
  if (n <= 0) return;
  check_w4_store(store, m, n, accumulate, norms, "launch_w4a16_wide");
  const auto* t = reinterpret_cast<const uint4*>(tiles);
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k),
            g = static_cast<int>(group_size);
  if (m <= 8) {
    return launch_nt<T, 1>(x, t, scale_zero, bias, im, in, ik, g, row_warps, out, stream, accumulate, store, norms);
  }
  if (m <= 16) {
    return launch_nt<T, 2>(x, t, scale_zero, bias, im, in, ik, g, row_warps, out, stream, accumulate, store, norms);
  }
  if (m <= 32) {
    return launch_nt<T, 4>(x, t, scale_zero, bias, im, in, ik, g, row_warps, out, stream, accumulate, store, norms);
  }
  launch_nt<T, 8>(x, t, scale_zero, bias, im, in, ik, g, row_warps, out, stream, accumulate, store, norms);
}

#define INSTANTIATE(T)                                                                                         \
  template void launch_w4a16_wide<T>(const T*, const uint32_t*, const uint32_t*, const T*, int64_t, int64_t, \
                                     int64_t, int64_t, int, T*, cudaStream_t, bool, W4Store, \
                                     const W4Norms&);
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
