// The tensor-core W4A16 product for one tile of tokens (m <= 8: decode at
// small batches) with the zero point taken out once a group instead of once
// a weight. w4a16_tiles.cu describes the operand layout.
//
// The mma takes the weights as the 16-bit numbers magic + q (one LOP3 a
// pair, no subtraction), and since
//   sum_i (q_i - z) x_i = sum_i (magic + q_i) x_i - (magic + z) sum_i x_i,
// the zero costs one fused multiply-add per accumulator and group against the
// group's sum of activations. Those sums are formed once per block, when the
// activations are staged in shared memory (their loads in the chunk loop then
// come from there). Each warp takes whole groups, so the mma accumulates a
// group's chunks in one register set and the scale, the zero and the sums are
// read once a group. That removes the 16 packed subtractions of a chunk and
// two fifths of its instructions, yet on the H200 at one row it is only a few
// per cent faster than w4a16_mma_kernel on the large shapes (gate_up 21.4
// against 22.0 us, down with 16-warp blocks 13.1-13.7 against 13.6-14.3) and
// no faster on the small ones: the instructions are not what holds the
// 4-bit GEMVs near 60 % of the copy bandwidth (BENCHMARKS.md). The timing
// keeps whichever wins a shape.
//
// Exactness: magic + q is exact in either type (its ulp is 1); the mma
// multiplies exactly and adds in f32, so the subtraction in f32 cancels
// magic · sum(x) (about magic / 8 times the result's size for random
// weights) and leaves some 2^-16 of relative error, far below the rounding
// of the 16-bit output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/w4_mma.cuh"
#include "backend/cuda/w4a16.h"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

using namespace w4;  // NOLINT: the shared kernel helpers

constexpr int kMaxGroupChunks = 2;  // groups of 64 or 128 inputs (a batch holds whole groups)
constexpr int kTokens = 8;          // one mma tile of tokens
// Beside the static partial sums and the norms' (8.6 KB at most), under the
// 48 KB of a launch that does not opt in.
constexpr size_t kMaxSharedBytes = 39 * 1024;

// Bytes of shared memory the kernel stages: x [m][k / 8 + 1 words] (a
// word of padding a row, so the 8 token rows of a load fall in different
// banks) and the sums [groups][kTokens].
size_t staged_bytes(int64_t m, int64_t k, int64_t group_size) {
  return static_cast<size_t>(m * (k / 8 + 1) * 16 + k / group_size * kTokens * static_cast<int64_t>(sizeof(float)));
}

// magic as a float, the offset the mma's weights carry.
template <typename T>
__device__ __forceinline__ float magic_value() {
  return std::is_same_v<T, __half> ? 1024.0f : 128.0f;
}

// Layout and arguments as w4a16_mma_kernel (w4a16_tiles.cu) at one tile of
// tokens, with blocks of kBlockWarps warps: RW of them take neighbouring row
// tiles, KW = kBlockWarps / RW split the groups (warp kw takes groups kw,
// kw + KW, ...). kGroupChunks: chunks a group (1 or 2). A lane loads a batch
// of kLoads 16-byte weight words, computes it once it has arrived, then
// loads the next. (8 words a batch, or a second batch loading while one is
// computed, measured no faster on the H200 at one row.)
template <typename T, int kBlockWarps, int RW, int kGroupChunks>
__global__ void __launch_bounds__(kBlockWarps * 32, kBlockWarps == 16 ? 2 : 3)  // at most 64 / 80 registers
    w4a16_group_sums_kernel(const T* __restrict__ x, const uint4* __restrict__ tiles,
                            const uint32_t* __restrict__ scale_zero, const T* __restrict__ bias, int m, int n,
                            int n_pad, int k, T* __restrict__ out, bool accumulate, W4Store store, W4Norms norms,
                            bool early) {
  constexpr int KW = kBlockWarps / RW, kLoads = 4, kBatchGroups = kLoads / kGroupChunks;
  static_assert(kLoads % kGroupChunks == 0, "a batch holds whole groups");
  extern __shared__ uint4 staged[];  // x [m][k / 8 + 1 words], then the sums [groups][kTokens] (f32)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rw = warp % RW, kw = warp / RW;
  const int row_tiles = n_pad / 16, chunks = k / kChunkInputs, groups = chunks / kGroupChunks;
  const int row_words = k / 8, row_stride = row_words + 1;  // 16-byte words of a row of x, and in shared memory
  float* sums = reinterpret_cast<float*>(staged + m * row_stride);
  const int tile = min(int(blockIdx.x) * RW + rw, row_tiles - 1);  // past the end: repeats the last, never stored
  const int g = lane / 4, t = lane % 4;
  const int row = tile * 16 + g;
  const uint4* weights = tiles + int64_t(tile) * chunks * 32 + lane;
  const int my_groups = groups > kw ? (groups - kw + KW - 1) / KW : 0;

  // A batch: the warp's groups first .. first + kBatchGroups - 1 (its
  // group j is the matrix's kw + KW j).
  struct Batch {
    uint4 w[kLoads];
    uint32_t sz_g[kBatchGroups], sz_g8[kBatchGroups];
  };
  auto load_batch = [&](Batch& b, int first) {
#pragma unroll
    for (int j = 0; j < kBatchGroups; ++j) {
      if (first + j < my_groups) {
        const int group = kw + KW * (first + j);
#pragma unroll
        for (int u = 0; u < kGroupChunks; ++u) {
          b.w[j * kGroupChunks + u] = __ldcs(weights + int64_t(group * kGroupChunks + u) * 32);  // read once
        }
        b.sz_g[j] = __ldg(scale_zero + int64_t(group) * n_pad + row);
        b.sz_g8[j] = __ldg(scale_zero + int64_t(group) * n_pad + row + 8);
      }
    }
  };

  // No kernel writes the weights: with `early` the first batch is in flight
  // while the previous kernel finishes.
  Batch current;
  if (early) load_batch(current, 0);
  wait_for_previous_kernel();
  if (!early) load_batch(current, 0);
  __shared__ float inv_rms[kW4NormRows];
  inverse_rms<kBlockWarps>(norms, m, k, inv_rms);

  // Stage x and each group's sum of every token. A group's words are
  // consecutive threads of one warp (group_size / 8 <= 16 of them), so
  // shuffles reduce it and one lane writes it: the same order every run.
  const int group_words = kGroupChunks * kChunkInputs / 8, total = m * row_words;
  for (int base = 0; base < total; base += kBlockWarps * 32) {  // the block's bounds: every lane shuffles
    const int i = base + int(threadIdx.x);
    float sum = 0.0f;
    if (i < total) {
      const uint4 word = __ldg(reinterpret_cast<const uint4*>(x) + i);
      staged[i / row_words * row_stride + i % row_words] = word;
      float v[8];
      to_floats(word, v, T{});
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += v[e];
    }
#pragma unroll
    for (int offset = group_words / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (i < total && i % group_words == 0) sums[(i % row_words) / group_words * kTokens + i / row_words] = sum;
  }
  for (int i = int(threadIdx.x); i < groups * kTokens; i += kBlockWarps * 32) {
    if (i % kTokens >= m) sums[i] = 0.0f;  // columns past m: never stored, but not garbage either
  }
  __syncthreads();

  const int token = min(g, m - 1);  // B column g; tokens past m read the last row, never stored
  const uint4* x_row = staged + token * row_stride + t * 2;
  const float magic = magic_value<T>();
  constexpr uint32_t kMagicPair = magic_bits<T>() * 0x10001u;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  auto compute_batch = [&](const Batch& b, int first) {
#pragma unroll
    for (int j = 0; j < kBatchGroups; ++j) {
      if (first + j >= my_groups) break;
      const int group = kw + KW * (first + j);
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int u = 0; u < kGroupChunks; ++u) {
        const uint4 word = b.w[j * kGroupChunks + u];
        const uint32_t words[4] = {word.x, word.y, word.z, word.w};
        const uint4 x0 = x_row[(group * kGroupChunks + u) * (kChunkInputs / 8)];
        const uint4 x1 = x_row[(group * kGroupChunks + u) * (kChunkInputs / 8) + 1];
        const uint32_t xb[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          uint32_t a[4];
#pragma unroll
          for (int r = 0; r < 4; ++r) a[r] = and_or<0x000F000Fu>(words[s] >> (4 * r), kMagicPair);
          mma_16816<T>(d, a, xb[2 * s], xb[2 * s + 1]);
        }
      }
      // Accumulator e: row g (+8 for e >= 2), token 2t + e % 2.
      const float2 sum = *reinterpret_cast<const float2*>(sums + group * kTokens + 2 * t);
      const uint32_t sz_g = b.sz_g[j], sz_g8 = b.sz_g8[j];
      const float offset_g = magic + static_cast<float>(sz_g >> 16), offset_g8 = magic + static_cast<float>(sz_g8 >> 16);
      const float scale_g = scale_of(sz_g), scale_g8 = scale_of(sz_g8);
      acc[0] = fmaf(scale_g, fmaf(-offset_g, sum.x, d[0]), acc[0]);
      acc[1] = fmaf(scale_g, fmaf(-offset_g, sum.y, d[1]), acc[1]);
      acc[2] = fmaf(scale_g8, fmaf(-offset_g8, sum.x, d[2]), acc[2]);
      acc[3] = fmaf(scale_g8, fmaf(-offset_g8, sum.y, d[3]), acc[3]);
    }
  };
  for (int first = 0; first < my_groups; first += kBatchGroups) {
    compute_batch(current, first);
    if (first + kBatchGroups < my_groups) load_batch(current, first + kBatchGroups);
  }
  if (early) allow_next_kernel();  // the weights are read: the next kernel may load its own

  // The K slices meet in shared memory (lane fastest: no bank conflicts),
  // then the block's rows are stored (with kSiluMul the thread of a gate row
  // stores for its up row too; norms as w4_mma.cuh's reduce_and_store).
  __shared__ float partial[KW][RW][4][32];
  __shared__ float squares[RW][kTokens][16];
  const bool scaled = norms.input_sums != nullptr, ahead = norms.ahead_sums != nullptr;
#pragma unroll
  for (int e = 0; e < 4; ++e) partial[kw][rw][e][lane] = acc[e];
  __syncthreads();
  for (int idx = threadIdx.x; idx < RW * 4 * 32; idx += kBlockWarps * 32) {
    const int l = idx % 32, e = (idx / 32) % 4, r = idx / 128;
    const int out_tile = int(blockIdx.x) * RW + r;
    const int out_row = out_tile * 16 + l / 4 + (e >= 2 ? 8 : 0), out_token = 2 * (l % 4) + e % 2;
    if (out_tile >= row_tiles || out_row >= n || out_token >= m) continue;
    if (store == W4Store::kSiluMul && e >= 2) continue;
    float v = 0.0f, v8 = 0.0f;
#pragma unroll
    for (int s = 0; s < KW; ++s) {
      v += partial[s][r][e][l];
      if (store == W4Store::kSiluMul) v8 += partial[s][r][e + 2][l];
    }
    const float stored = store_sum<T>(store, v, v8, scaled ? inv_rms[out_token] : 1.0f, bias, n, out_row, out_token,
                                      out, accumulate);
    if (ahead) store_ahead<T>(norms, stored, n, out_row, out_token, squares[r]);
  }
  if (ahead) {
    __syncthreads();
    const int r = threadIdx.x / kTokens, token = threadIdx.x % kTokens, out_tile = int(blockIdx.x) * RW + r;
    if (r < RW && out_tile < row_tiles && token < m) store_ahead_sum(norms, squares[r], n, out_tile, token);
  }
}

template <typename T, int kBlockWarps, int RW>
void launch_variant(const T* x, const uint4* tiles, const uint32_t* scale_zero, const T* bias, int m, int n, int k,
                    int group_chunks, T* out, cudaStream_t stream, bool accumulate, W4Store store,
                    const W4Norms& norms, size_t shared) {
  const int n_pad = (n + 15) / 16 * 16;
  const unsigned blocks = static_cast<unsigned>((n_pad / 16 + RW - 1) / RW);
  const bool early = early_successor_launch() && programmatic_launch_enabled();
  auto launch = [&](auto kernel) {
    launch_after(kernel, blocks, kBlockWarps * 32, shared, stream, x, tiles, scale_zero, bias, m, n, n_pad, k, out,
                 accumulate, store, norms, early);
  };
  if (group_chunks == 1) return launch(w4a16_group_sums_kernel<T, kBlockWarps, RW, 1>);
  launch(w4a16_group_sums_kernel<T, kBlockWarps, RW, 2>);
}

}  // namespace

bool w4_group_sums_supported(int64_t m, int64_t k, int64_t group_size) {
  return m >= 1 && m <= kTokens && w4_tiles_supported(k, group_size) && group_size <= kMaxGroupChunks * kChunkInputs &&
         staged_bytes(m, k, group_size) <= kMaxSharedBytes;
}

template <typename T>
void launch_w4a16_group_sums(const T* x, const uint32_t* tiles, const uint32_t* scale_zero, const T* bias, int64_t m,
                             int64_t n, int64_t k, int64_t group_size, int kernel, T* out, cudaStream_t stream,
                             bool accumulate, W4Store store, const W4Norms& norms) {
  constexpr int kKernels = static_cast<int>(sizeof(kW4GroupSumsKernels) / sizeof(kW4GroupSumsKernels[0]));
  if (!w4_group_sums_supported(m, k, group_size) || kernel < 0 || kernel >= kKernels) {
    throw Error(ErrorKind::kInternal, "w4a16 group sums: no kernel " + std::to_string(kernel) + " for m " +
                                          std::to_string(m) + ", k " + std::to_string(k) + ", group " +
                                          std::to_string(group_size));
  }
  if (n <= 0) return;
  check_w4_store(store, m, n, accumulate, norms, "launch_w4a16_group_sums");
  const auto* t = reinterpret_cast<const uint4*>(tiles);
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int group_chunks = static_cast<int>(group_size / kChunkInputs);
  const size_t shared = staged_bytes(m, k, group_size);
  const W4GroupSumsKernel& v = kW4GroupSumsKernels[kernel];
  if (v.block_warps == 16) {
    launch_variant<T, 16, 1>(x, t, scale_zero, bias, im, in, ik, group_chunks, out, stream, accumulate, store, norms,
                                shared);
  } else if (v.row_warps == 2) {
    launch_variant<T, 8, 2>(x, t, scale_zero, bias, im, in, ik, group_chunks, out, stream, accumulate, store, norms,
                                shared);
  } else {
    launch_variant<T, 8, 1>(x, t, scale_zero, bias, im, in, ik, group_chunks, out, stream, accumulate, store, norms,
                                shared);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

#define INSTANTIATE(T)                                                                                          \
  template void launch_w4a16_group_sums<T>(const T*, const uint32_t*, const uint32_t*, const T*, int64_t,     \
                                           int64_t, int64_t, int64_t, int, T*, cudaStream_t, bool, W4Store, \
                                           const W4Norms&);
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
