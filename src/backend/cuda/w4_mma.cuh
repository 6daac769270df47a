// Device helpers shared by the tensor-core W4A16 kernels (w4a16_tiles.cu,
// w4a16_group_sums.cu, w4a16_wide.cu): the tile layout's constants, the
// nibble-to-16-bit conversion, the mma.sync of 16 x 16 weights by 16 x 8
// activations, a chunk's products and the meeting of a block's K slices.
// w4a16_tiles.cu describes the layout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/w4a16.h"

namespace tessera::backend::cuda::w4 {

constexpr int kWarps = 8;       // warps of a block: row tiles x K slices
constexpr int kChunkInputs = 64;

// The 16-bit pattern of magic + 0 (its ulp is 1, so magic + q is exact for q < 16).
template <typename T>
__host__ __device__ constexpr uint32_t magic_bits() {
  return std::is_same_v<T, __half> ? 0x6400u : 0x4300u;
}

__device__ __forceinline__ float scale_of(uint32_t scale_zero) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(scale_zero & 0xFFFFu)));
}

// Both halves magic + zero, from a repacked scale-and-zero word.
template <typename T>
__device__ __forceinline__ uint32_t magic_zero(uint32_t scale_zero) {
  const uint32_t h = magic_bits<T>() | (scale_zero >> 16);
  return h | (h << 16);
}

// (a & mask) | bits in one LOP3: the compiler splits the two constants of
// the C expression into two instructions, and these run 16 times a chunk.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t bits) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(kMask), "r"(bits));  // 0xEA: (a & b) | c
  return d;
}

// One A register: two weights q - zero, from a word shifted to its nibble pair.
template <typename T>
__device__ __forceinline__ uint32_t weight_pair(uint32_t shifted, uint32_t magic_zero_pair) {
  const uint32_t biased = and_or<0x000F000Fu>(shifted, magic_bits<T>() * 0x10001u);
  uint32_t result;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 d = __hsub2(*reinterpret_cast<const __half2*>(&biased),
                              *reinterpret_cast<const __half2*>(&magic_zero_pair));
    result = *reinterpret_cast<const uint32_t*>(&d);
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                     *reinterpret_cast<const __nv_bfloat162*>(&magic_zero_pair));
    result = *reinterpret_cast<const uint32_t*>(&d);
#else
    result = 0;
#endif
  }
  return result;
}

// d += A (16 x 16) · B (16 x 8), f32 accumulate. Never launched below sm_80
// (the backend tiles weights only where the kernel image is 8.0 or newer).
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// acc[r] += the products of chunk c of the lane's row tile r (w[r]: its
// 16-byte A fragments; sz_g, sz_g8: the scale-and-zero words of rows g and
// g + 8) with the chunk's activations of NT 8-token tiles, each read once
// for all RT row tiles.
template <typename T, int NT, int RT>
__device__ __forceinline__ void chunk_product(float (&acc)[RT][NT][4], const uint4 (&w)[RT],
                                              const uint32_t (&sz_g)[RT], const uint32_t (&sz_g8)[RT],
                                              const T* __restrict__ x, int m, int k, int c, int lane) {
  const int g = lane / 4, t = lane % 4;
  // Every row tile's A fragments of the chunk's four k-steps (q - zero, exact).
  uint32_t a[RT][4][4];
  float scale_g[RT], scale_g8[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const uint32_t zero_g = magic_zero<T>(sz_g[r]), zero_g8 = magic_zero<T>(sz_g8[r]);
    const uint32_t words[4] = {w[r].x, w[r].y, w[r].z, w[r].w};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
      for (int q = 0; q < 4; ++q) a[r][s][q] = weight_pair<T>(words[s] >> (4 * q), q % 2 == 0 ? zero_g : zero_g8);
    }
    scale_g[r] = scale_of(sz_g[r]);
    scale_g8[r] = scale_of(sz_g8[r]);
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    // Tokens past m read the last row instead of zeros: no predicate and no
    // zeroing a chunk, and their columns are never stored.
    const int token = min(i * 8 + g, m - 1);
    const uint4* xp = reinterpret_cast<const uint4*>(x + int64_t(token) * k + c * kChunkInputs + t * 16);
    const uint4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_16816<T>(d, a[r][0], x0.x, x0.y);
      mma_16816<T>(d, a[r][1], x0.z, x0.w);
      mma_16816<T>(d, a[r][2], x1.x, x1.y);
      mma_16816<T>(d, a[r][3], x1.z, x1.w);
      acc[r][i][0] = fmaf(scale_g[r], d[0], acc[r][i][0]);
      acc[r][i][1] = fmaf(scale_g[r], d[1], acc[r][i][1]);
      acc[r][i][2] = fmaf(scale_g8[r], d[2], acc[r][i][2]);
      acc[r][i][3] = fmaf(scale_g8[r], d[3], acc[r][i][3]);
    }
  }
}

// The same for a warp of one row tile (word: its 16-byte A fragments).
template <typename T, int NT>
__device__ __forceinline__ void chunk_product(float (&acc)[NT][4], uint4 word, uint32_t sz_g, uint32_t sz_g8,
                                              const T* __restrict__ x, int m, int k, int c, int lane) {
  const uint4 w[1] = {word};
  const uint32_t g[1] = {sz_g}, g8[1] = {sz_g8};
  chunk_product<T, NT, 1>(reinterpret_cast<float(&)[1][NT][4]>(acc), w, g, g8, x, m, k, c, lane);
}

// Stores a block's sum v of tile row `row` for `token` as `store` says
// (w4a16.h, W4Store), scaled by `scale` (the token's 1 / rms where the input
// is r ∘ g: W4Norms) before the bias; returns the value stored (kRows,
// kPairedRows). For kSiluMul `row` is a gate row (rows 0-7 of its tile) and
// v8 the sum of row + 8, its up row; each is rounded to T as a stored
// product would be, then silu_times forms what the SiLU·mul op would.
template <typename T>
__device__ __forceinline__ float store_sum(W4Store store, float v, float v8, float scale, const T* __restrict__ bias,
                                           int n, int row, int token, T* __restrict__ out, bool accumulate) {
  v *= scale;
  if (store == W4Store::kSiluMul) {
    v8 *= scale;
    const int64_t gate_row = paired_row(row, n), up_row = gate_row + n / 2;
    if (bias != nullptr) {
      v += to_float(bias[gate_row]);
      v8 += to_float(bias[up_row]);
    }
    const float gate = to_float(from_float<T>(v)), up = to_float(from_float<T>(v8));
    out[int64_t(token) * (n / 2) + gate_row] = from_float<T>(silu_times(gate, up));
    return 0.0f;
  }
  const int64_t o = store == W4Store::kPairedRows ? paired_row(row, n) : row;
  if (bias != nullptr) v += to_float(bias[o]);
  if (accumulate) v += to_float(out[int64_t(token) * n + o]);
  const T stored = from_float<T>(v);
  out[int64_t(token) * n + o] = stored;
  return to_float(stored);
}

// Each token's 1 / rms of the residual r whose r ∘ g the input is, from
// W4Norms::input_sums [m, k / 16], into inv_rms [m] (shared memory): a warp
// a token, its lanes' sums in a fixed order. Called right after the wait on
// the kernel that wrote the sums, so their reads are in flight with the
// first weights'; the barrier before the store makes them visible.
template <int kBlockWarps>
__device__ __forceinline__ void inverse_rms(const W4Norms& norms, int m, int k, float (&inv_rms)[kW4NormRows]) {
  static_assert(kW4NormRows <= 64, "a warp a token");
  if (norms.input_sums == nullptr) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slots = k / 16;
  for (int token = warp; token < m; token += kBlockWarps) {
    float s = 0.0f;
    for (int j = lane; j < slots; j += 32) s += norms.input_sums[int64_t(token) * slots + j];
    s = warp_sum(s);
    if (lane == 0) inv_rms[token] = rsqrtf(s / static_cast<float>(k) + norms.eps);
  }
}

// The ahead norm's share of residual value `stored` (row, token; W4Norms):
// r ∘ g into ahead_formed, r² into the tile's squares [token][row % 16].
template <typename T, int kTokens>
__device__ __forceinline__ void store_ahead(const W4Norms& norms, float stored, int n, int row, int token,
                                            float (&squares)[kTokens][16]) {
  const T* g = static_cast<const T*>(norms.ahead_weight);
  static_cast<T*>(norms.ahead_formed)[int64_t(token) * n + row] = from_float<T>(stored * to_float(g[row]));
  squares[token][row % 16] = stored * stored;
}

// Row tile `tile`'s sum of squares of `token`, rows in order, into
// W4Norms::ahead_sums (after a barrier past store_ahead).
template <int kTokens>
__device__ __forceinline__ void store_ahead_sum(const W4Norms& norms, const float (&squares)[kTokens][16], int n,
                                                int tile, int token) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) s += squares[token][i];
  norms.ahead_sums[int64_t(token) * (n / 16) + tile] = s;
}

// The shared memory of a block's norms (W4Norms) beside its partial sums:
// each token's 1 / rms where the input is r ∘ g, and the ahead norm's r² by
// row warp, token and tile row (only at up to two tiles of tokens).
template <int NT, int RW>
struct NormShared {
  static constexpr bool kNorms = NT <= 2;
  static constexpr int kTokens = kNorms ? NT * 8 : 1;
  float inv_rms[kW4NormRows];
  float squares[kNorms ? RW : 1][kTokens][16];
};

// The K slices of a block (warp = rw + RW kw) meet in shared memory, lane
// fastest, so no bank conflicts; then the block's rows are stored. A warp
// holds RT neighbouring row tiles (block row warp w: tiles (RW blockIdx + w)
// RT + r); they meet one r at a time, so `partial` stays kWarps x NT x 512
// bytes. Accumulator e of acc[r][i]: row g (+8 for e >= 2) of tile r, token
// 8i + 2t + e % 2. With kSiluMul the thread of accumulator e < 2 stores for
// both rows. `norms` (W4Norms) at up to two tiles of tokens (NT <= 2)
// only: shared.inv_rms as inverse_rms left it where the input is r ∘ g.
template <typename T, int NT, int RW, int RT>
__device__ __forceinline__ void reduce_and_store(float (&partial)[kWarps / RW][RW][NT * 4][32],
                                                 const float (&acc)[RT][NT][4], const T* __restrict__ bias, int m,
                                                 int n, int row_tiles, T* __restrict__ out, bool accumulate,
                                                 W4Store store, const W4Norms& norms, NormShared<NT, RW>& shared) {
  constexpr int KW = kWarps / RW;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rw = warp % RW, kw = warp / RW;
  constexpr bool kNorms = NormShared<NT, RW>::kNorms;
  constexpr int kTokens = NormShared<NT, RW>::kTokens;
  auto& squares = shared.squares;
  const float* inv_rms = shared.inv_rms;
  const bool scaled = kNorms && norms.input_sums != nullptr, ahead = kNorms && norms.ahead_sums != nullptr;
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    if (r > 0) __syncthreads();  // the previous row tile's sums are read
#pragma unroll
    for (int i = 0; i < NT; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[kw][rw][i * 4 + e][lane] = acc[r][i][e];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < RW * NT * 4 * 32; idx += blockDim.x) {
      const int l = idx % 32, e = (idx / 32) % 4, i = (idx / 128) % NT, w = idx / (128 * NT);
      const int out_tile = (int(blockIdx.x) * RW + w) * RT + r;
      const int out_row = out_tile * 16 + l / 4 + (e >= 2 ? 8 : 0), token = i * 8 + 2 * (l % 4) + e % 2;
      if (out_tile >= row_tiles || out_row >= n || token >= m) continue;
      if (store == W4Store::kSiluMul && e >= 2) continue;
      float v = 0.0f, v8 = 0.0f;
#pragma unroll
      for (int s = 0; s < KW; ++s) {
        v += partial[s][w][i * 4 + e][l];
        if (store == W4Store::kSiluMul) v8 += partial[s][w][i * 4 + e + 2][l];
      }
      const float stored =
          store_sum<T>(store, v, v8, scaled ? inv_rms[token] : 1.0f, bias, n, out_row, token, out, accumulate);
      if (ahead) store_ahead<T>(norms, stored, n, out_row, token, squares[kNorms ? w : 0]);
    }
    if (ahead) {
      __syncthreads();
      const int w = threadIdx.x / kTokens, token = threadIdx.x % kTokens;
      const int out_tile = (int(blockIdx.x) * RW + w) * RT + r;
      if (w < RW && out_tile < row_tiles && token < m) {
        store_ahead_sum(norms, squares[kNorms ? w : 0], n, out_tile, token);
      }
    }
  }
}

// The same for a warp of one row tile (acc[NT][4]).
template <typename T, int NT, int RW>
__device__ __forceinline__ void reduce_and_store(float (&partial)[kWarps / RW][RW][NT * 4][32],
                                                 const float (&acc)[NT][4], const T* __restrict__ bias, int m, int n,
                                                 int row_tiles, T* __restrict__ out, bool accumulate, W4Store store,
                                                 const W4Norms& norms, NormShared<NT, RW>& shared) {
  reduce_and_store<T, NT, RW, 1>(partial, reinterpret_cast<const float(&)[1][NT][4]>(acc), bias, m, n, row_tiles,
                                 out, accumulate, store, norms, shared);
}

}  // namespace tessera::backend::cuda::w4
