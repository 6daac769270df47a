// Paged causal GQA attention for prefill chunks on tensor cores
// (flash-attention-2 style), the fast twin of attention_prefill.cu.
//
// Design: one thread block of kWarps warps per (query tile, KV head, row
// chunk). The rows of a block are 16·kMTiles·kWarps (query, head) pairs of one
// KV head's group, head fastest: row r of chunk c is pair f = kRows·c + r,
// query f / G of the tile and query head kv·G + f % G (G = heads / kv_heads).
// So the G heads that read the same keys share every K/V tile a block stages,
// and a tile of one decode token still fills G rows. Each warp owns kMTiles
// m-tiles of 16 rows: every K/V fragment it reads from shared memory feeds
// kMTiles products, which is what bounds this kernel (ldmatrix traffic per
// mma), and the block's kWarps warps share one staged copy of each tile.
//
// Per K/V tile of kKeys positions: S = Q·Kᵀ by mma.sync m16n8k16 (16-bit
// inputs, f32 accumulate) with Q held in registers as A fragments and K read
// from shared memory by ldmatrix; masked, scaled and exponentiated in
// registers (online softmax, f32, base 2); P is rounded to 16 bits and reused
// directly as the A fragments of O += P·V (V by ldmatrix.trans). K/V rows are
// gathered through the block table by cp.async into kStages shared-memory
// stages, so the next tile loads while this one is computed (one barrier a
// tile). Tiles wholly before every row's position skip the mask; tiles after
// the block's last position are never loaded (causal skipping). Rows of
// shared memory are padded by 16 bytes so ldmatrix's eight row reads fall in
// different banks.
//
// A quantized cache takes the same kernel with C = uint8_t (--quant-policy 8)
// or Nibbles (--quant-policy 4; kv_codes.cuh): each 8-code piece of a row is
// loaded with the row's (scale, zero) and dequantized into 16 bits as it is
// stored into shared memory (plain loads and stores where 16-bit rows take
// cp.async: the next tile's loads no longer overlap this one's products).

// mma.sync with bf16 needs sm_80: the kernel body exists only in images built
// for compute_80 or newer, and the launcher is never called on older images
// (prefill_kernel_choice.cc asks the loaded image first).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_codes.cuh"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kPad = 8;             // elements of padding per shared row (16 bytes)
constexpr int kTileQueries = 64;    // queries per tile, as prepare() cuts them

template <int kHeadDim, int kStages, int kKeys>
constexpr int shared_bytes() {
  return kStages * 2 /*K, V*/ * kKeys * (kHeadDim + kPad) * 2 /*bytes*/;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

// Four 8x8 16-bit matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// d [16x8 f32] += a [16x16] · b [16x8]. Fragments (lane = 4·g + i):
//   a: {row g, cols 2i..2i+1}, {row g+8, cols 2i..}, {row g, cols 2i+8..}, {row g+8, cols 2i+8..}
//   b: {rows 2i..2i+1, col g}, {rows 2i+8.., col g}
//   d: row g cols 2i, 2i+1; row g+8 cols 2i, 2i+1
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two f32 as one register of two 16-bit values, `low` in the low half (the smaller column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float low, float high);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float low, float high) {
  __nv_bfloat162 v = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float low, float high) {
  __half2 v = __floats2half2_rn(low, high);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Eight codes (uint2: 8-bit, uint32_t: 4-bit) times the row's scale plus its
// zero (cpu::dequantize_row's fmaf), rounded to T: one 16-byte piece of a
// shared row.
template <typename T, typename Codes>
__device__ __forceinline__ uint4 dequantize8(Codes codes, float2 params) {
  float c[8];
  code_values(codes, c);
  auto at = [&](int i) { return fmaf(c[i], params.x, params.y); };
  return make_uint4(pack2<T>(at(0), at(1)), pack2<T>(at(2), at(3)), pack2<T>(at(4), at(5)), pack2<T>(at(6), at(7)));
}

#endif  // __CUDA_ARCH__ >= 800

// C: the cache's element type, T or uint8_t or Nibbles (codes; k_params/v_params
// hold each row's (scale, zero)).
template <typename T, typename C, int kHeadDim, int kWarps, int kStages, int kM, int kKeys>
__global__ void __launch_bounds__(32 * kWarps)
    prefill_attention_mma_kernel(const T* __restrict__ qkv, const int32_t* __restrict__ positions,
                                 const int32_t* __restrict__ tile_seq, const int32_t* __restrict__ tile_first,
                                 const int32_t* __restrict__ tile_count, int32_t num_tiles,
                                 const int32_t* __restrict__ block_tables, int32_t max_blocks_per_seq,
                                 int32_t heads, int32_t kv_heads, int32_t block_size, int32_t window,
                                 const C* __restrict__ k_cache, const C* __restrict__ v_cache,
                                 const float2* __restrict__ k_params, const float2* __restrict__ v_params,
                                 T* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(kHeadDim % 16 == 0, "head_dim is a multiple of the mma's k");
  static_assert(kKeys % 16 == 0, "a K/V tile is whole k steps of P·V");
  constexpr int kRows = 16 * kM * kWarps;           // (query, head) rows per block
  constexpr int kThreads = 32 * kWarps;
  constexpr int kStride = kHeadDim + kPad;          // shared row, elements
  constexpr int kChunks = kHeadDim / 8;             // 16-byte pieces of a row
  constexpr int kSteps = kHeadDim / 16;             // k steps of Q·Kᵀ
  constexpr int kKeyFrags = kKeys / 8;              // n tiles of S
  constexpr int kDimFrags = kHeadDim / 8;           // n tiles of O
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* k_tiles = reinterpret_cast<T*>(shared_raw);   // [kStages][kKeys][kStride]
  T* v_tiles = k_tiles + kStages * kKeys * kStride; // [kStages][kKeys][kStride]

  // Longest tiles (the last of a sequence) first: they bound the kernel's tail.
  const int32_t tile = num_tiles - 1 - static_cast<int32_t>(blockIdx.x);
  const int32_t kv = blockIdx.y, chunk = blockIdx.z;
  const int32_t group = heads / kv_heads;
  const int32_t count = tile_count[tile];
  const int32_t first_pair = chunk * kRows;
  if (first_pair >= count * group) return;  // this tile has fewer rows than chunks
  const int32_t last_pair = min(first_pair + kRows, count * group) - 1;
  const int32_t seq = tile_seq[tile], first = tile_first[tile];
  const int32_t* table = block_tables + int64_t(seq) * max_blocks_per_seq;
  // Positions of a tile are consecutive, so the block's first and last rows bound every key it needs.
  const int32_t low_position = positions[first + first_pair / group];
  const int32_t high_position = positions[first + last_pair / group];
  const int32_t key_begin = window > 0 ? max(0, low_position - window + 1) : 0;
  const int32_t num_key_tiles = (high_position - key_begin) / kKeys + 1;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, i4 = lane % 4;
  const int64_t qkv_size = int64_t(heads + 2 * kv_heads) * kHeadDim;

  // This thread's rows: g and g + 8 of each of its warp's kM m-tiles (r = 2·mt + h).
  // Only the positions live through the loop (the mask needs them); a row's token
  // and head are recomputed where Q is read and O written.
  auto pair_of = [&](int r) { return first_pair + (warp * kM + r / 2) * 16 + g + 8 * (r % 2); };
  int32_t position[2 * kM];
  #pragma unroll
  for (int r = 0; r < 2 * kM; ++r) {
    const int32_t pair = pair_of(r);
    position[r] = pair <= last_pair ? positions[first + pair / group] : -1;  // -1: every key masked
  }

  // Q as A fragments, straight from global memory (read once).
  uint32_t q[kM][kSteps][4];
  #pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int32_t pair = pair_of(2 * mt + h);
      const bool valid = pair <= last_pair;
      const T* row = qkv + (first + (valid ? pair / group : 0)) * qkv_size +
                     int64_t(kv * group + (valid ? pair % group : 0)) * kHeadDim + 2 * i4;
      #pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        q[mt][s][h] = valid ? *reinterpret_cast<const uint32_t*>(row + s * 16) : 0u;
        q[mt][s][h + 2] = valid ? *reinterpret_cast<const uint32_t*>(row + s * 16 + 8) : 0u;
      }
    }
  }

  // Stages K and V rows of positions [k0, k0 + kKeys) into stage `stage`; rows past
  // high_position are zeros (their scores are masked, and 0 · V must not be NaN).
  auto load_tile = [&](int32_t k0, int stage) {
    T* k_stage = k_tiles + stage * kKeys * kStride;
    T* v_stage = v_tiles + stage * kKeys * kStride;
    for (int index = threadIdx.x; index < kKeys * kChunks; index += kThreads) {
      const int j = index / kChunks, c = index % kChunks;
      const int32_t p = k0 + j;
      const bool inside = p <= high_position;
      int64_t row = 0;
      if (inside) row = (int64_t(table[p / block_size]) * kv_heads + kv) * block_size + p % block_size;
      const int64_t offset = row * kHeadDim + c * 8;
      if constexpr (sizeof(C) == 1) {
        using Codes = std::conditional_t<kElementBits<C> == 4, uint32_t, uint2>;  // 8 codes
        Codes k_codes{}, v_codes{};
        float2 k_pair = make_float2(0.0f, 0.0f), v_pair = k_pair;  // rows past the end: zeros
        if (inside) {
          k_codes = *static_cast<const Codes*>(element_address(k_cache, offset));
          v_codes = *static_cast<const Codes*>(element_address(v_cache, offset));
          k_pair = k_params[row];
          v_pair = v_params[row];
        }
        *reinterpret_cast<uint4*>(k_stage + j * kStride + c * 8) = dequantize8<T>(k_codes, k_pair);
        *reinterpret_cast<uint4*>(v_stage + j * kStride + c * 8) = dequantize8<T>(v_codes, v_pair);
      } else {
        cp_async_16(shared_address(k_stage + j * kStride + c * 8), k_cache + offset, inside ? 16 : 0);
        cp_async_16(shared_address(v_stage + j * kStride + c * 8), v_cache + offset, inside ? 16 : 0);
      }
    }
  };

  float o[kM][kDimFrags][4];
  float m[2 * kM], l[2 * kM];
  #pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    #pragma unroll
    for (int d = 0; d < kDimFrags; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
  }
  #pragma unroll
  for (int r = 0; r < 2 * kM; ++r) m[r] = -INFINITY, l[r] = 0.0f;
  const float scale_log2 = rsqrtf(static_cast<float>(kHeadDim)) * 1.4426950408889634f;

  // kStages - 1 tiles in flight ahead of the one computed; one commit group per
  // tile (empty past the last), so wait_group counts tiles.
  #pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_key_tiles) load_tile(key_begin + s * kKeys, s);
    cp_async_commit();
  }
  for (int32_t t = 0; t < num_key_tiles; ++t) {
    const int32_t k0 = key_begin + t * kKeys;
    const int stage = t % kStages;
    cp_async_wait<kStages - 2>();  // tile t has landed (this thread's copies)
    __syncthreads();  // ... every thread's, and every warp is done with the stage refilled next
    if (t + kStages - 1 < num_key_tiles) load_tile(k0 + (kStages - 1) * kKeys, (t + kStages - 1) % kStages);
    cp_async_commit();
    const T* k_stage = k_tiles + stage * kKeys * kStride;
    const T* v_stage = v_tiles + stage * kKeys * kStride;

    // S [16 rows x kKeys] per m-tile = Q · Kᵀ. ldmatrix x4 gives b0, b1 of key tiles j and j + 1:
    // matrices (keys j·8.., dims s·16..), (j·8.., s·16+8..), ((j+1)·8.., s·16..), ((j+1)·8.., s·16+8..);
    // each is used by all kM m-tiles, which is what a warp's kM rows of 16 save in shared-memory reads.
    float score[kM][kKeyFrags][4];
    #pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      #pragma unroll
      for (int j = 0; j < kKeyFrags; ++j) score[mt][j][0] = score[mt][j][1] = score[mt][j][2] = score[mt][j][3] = 0.0f;
    }
    #pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      #pragma unroll
      for (int j = 0; j < kKeyFrags; j += 2) {
        uint32_t b[4];
        const int key = j * 8 + (lane & 7) + (lane >> 4) * 8;
        const int dim = s * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(b, shared_address(k_stage + key * kStride + dim));
        #pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          mma_16816<T>(score[mt][j], q[mt][s], b[0], b[1]);
          mma_16816<T>(score[mt][j + 1], q[mt][s], b[2], b[3]);
        }
      }
    }

    // The mask is needed only where some key lies after the first row's position
    // (which covers keys past the block's last one) or before the last row's
    // window. Rows past the block's pairs have zero Q and are never written.
    const bool masked = k0 + kKeys - 1 > low_position || (window > 0 && k0 <= high_position - window);
    #pragma unroll
    for (int r = 0; r < 2 * kM; ++r) {
      const int mt = r / 2, h = r % 2;
      float row_max = -INFINITY;
      #pragma unroll
      for (int j = 0; j < kKeyFrags; ++j) {
        #pragma unroll
        for (int e = 0; e < 2; ++e) {
          float x = score[mt][j][2 * h + e] * scale_log2;
          if (masked) {
            const int32_t p = k0 + j * 8 + 2 * i4 + e;
            if (p > position[r] || (window > 0 && p <= position[r] - window)) x = -INFINITY;
          }
          score[mt][j][2 * h + e] = x;
          row_max = fmaxf(row_max, x);
        }
      }
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
      const float m_new = fmaxf(m[r], row_max);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet
      const float correction = exp2f(m[r] - m_use);
      m[r] = m_new;
      l[r] *= correction;
      #pragma unroll
      for (int d = 0; d < kDimFrags; ++d) {
        o[mt][d][2 * h] *= correction;
        o[mt][d][2 * h + 1] *= correction;
      }
      #pragma unroll
      for (int j = 0; j < kKeyFrags; ++j) {
        #pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2f(score[mt][j][2 * h + e] - m_use);
          score[mt][j][2 * h + e] = p;
          l[r] += p;  // this thread's part of the row sum; the four parts are added at the end
        }
      }
    }

    // O += P · V. P's accumulator layout for key tiles 2k, 2k+1 is the A layout of
    // keys [16k, 16k+16); ldmatrix.trans gives b0, b1 of dim tiles d and d + 1:
    // matrices (keys 16k.., dims d·8..), (16k+8.., d·8..), (16k.., d·8+8..), (16k+8.., d·8+8..).
    #pragma unroll
    for (int k = 0; k < kKeys / 16; ++k) {
      uint32_t a[kM][4];
      #pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        a[mt][0] = pack2<T>(score[mt][2 * k][0], score[mt][2 * k][1]);
        a[mt][1] = pack2<T>(score[mt][2 * k][2], score[mt][2 * k][3]);
        a[mt][2] = pack2<T>(score[mt][2 * k + 1][0], score[mt][2 * k + 1][1]);
        a[mt][3] = pack2<T>(score[mt][2 * k + 1][2], score[mt][2 * k + 1][3]);
      }
      #pragma unroll
      for (int d = 0; d < kDimFrags; d += 2) {
        uint32_t b[4];
        const int key = k * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int dim = d * 8 + (lane >> 4) * 8;
        ldmatrix_x4_trans(b, shared_address(v_stage + key * kStride + dim));
        #pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          mma_16816<T>(o[mt][d], a[mt], b[0], b[1]);
          mma_16816<T>(o[mt][d + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  #pragma unroll
  for (int r = 0; r < 2 * kM; ++r) {
    const int mt = r / 2, h = r % 2;
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int32_t pair = pair_of(r);
    if (pair > last_pair) continue;
    const float inv = 1.0f / sum;
    T* row = out + ((first + pair / group) * int64_t(heads) + kv * group + pair % group) * kHeadDim + 2 * i4;
    #pragma unroll
    for (int d = 0; d < kDimFrags; ++d) {
      *reinterpret_cast<uint32_t*>(row + d * 8) = pack2<T>(o[mt][d][2 * h] * inv, o[mt][d][2 * h + 1] * inv);
    }
  }
#endif  // __CUDA_ARCH__ >= 800
}

template <typename T, typename C, int kHeadDim, int kWarps, int kStages, int kM, int kKeys>
void launch_config(const T* qkv, const int32_t* positions, const int32_t* tile_seq, const int32_t* tile_first,
            const int32_t* tile_count, int64_t num_tiles, const int32_t* block_tables, int32_t max_blocks_per_seq,
            int64_t heads, int64_t kv_heads, int64_t block_size, int64_t window, const C* k_cache, const C* v_cache,
            const float2* k_params, const float2* v_params, T* out, cudaStream_t stream) {
  auto kernel = prefill_attention_mma_kernel<T, C, kHeadDim, kWarps, kStages, kM, kKeys>;
  constexpr int bytes = shared_bytes<kHeadDim, kStages, kKeys>();
  constexpr int kRows = 16 * kM * kWarps;
  // Above 48 KiB of dynamic shared memory a kernel must opt in (per device, so every launch says it).
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const int64_t chunks = (kTileQueries * (heads / kv_heads) + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(kv_heads), static_cast<unsigned>(chunks));
  kernel<<<grid, 32 * kWarps, bytes, stream>>>(qkv, positions, tile_seq, tile_first, tile_count,
                                            static_cast<int32_t>(num_tiles), block_tables, max_blocks_per_seq,
                                            static_cast<int32_t>(heads), static_cast<int32_t>(kv_heads),
                                            static_cast<int32_t>(block_size), static_cast<int32_t>(window), k_cache,
                                            v_cache, k_params, v_params, out);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// Eight warps of two m-tiles each (256 rows: a whole 64-query tile of a
// GQA group of 4) over 32-key tiles in two stages. Against the first design
// (four warps of one m-tile, 64-key tiles) at 4,096 tokens on an H200: 0.764
// against 1.019 ms a layer; a third stage, or eight warps of one m-tile,
// gained less (docs/BENCHMARKS.md).
constexpr int kWarps = 8, kStages = 2, kMTiles = 2, kKeys = 32;

template <typename T, typename C, int kHeadDim>
void launch(const T* qkv, const int32_t* positions, const int32_t* tile_seq, const int32_t* tile_first,
            const int32_t* tile_count, int64_t num_tiles, const int32_t* block_tables, int32_t max_blocks_per_seq,
            int64_t heads, int64_t kv_heads, int64_t block_size, int64_t window, const C* k_cache, const C* v_cache,
            const float2* k_params, const float2* v_params, T* out, cudaStream_t stream) {
  launch_config<T, C, kHeadDim, kWarps, kStages, kMTiles, kKeys>(qkv, positions, tile_seq, tile_first, tile_count,
                                                                  num_tiles, block_tables, max_blocks_per_seq, heads,
                                                                  kv_heads, block_size, window, k_cache, v_cache,
                                                                  k_params, v_params, out, stream);
}

// Checks the heads and picks the kernel for head_dim (64 or 128).
template <typename T, typename C>
void launch_head_dim(const T* qkv, const int32_t* positions, const int32_t* tile_seq, const int32_t* tile_first,
                     const int32_t* tile_count, int64_t num_tiles, const int32_t* block_tables,
                     int32_t max_blocks_per_seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                     int64_t block_size, int64_t window, const C* k_cache, const C* v_cache, const float2* k_params,
                     const float2* v_params, T* out, cudaStream_t stream) {
  if (num_tiles == 0) return;
  if (heads % kv_heads != 0) {
    throw Error(ErrorKind::kInternal, "prefill attention: heads " + std::to_string(heads) +
                                          " not a multiple of kv_heads " + std::to_string(kv_heads));
  }
  switch (head_dim) {
    case 64:
      launch<T, C, 64>(qkv, positions, tile_seq, tile_first, tile_count, num_tiles, block_tables, max_blocks_per_seq,
                       heads, kv_heads, block_size, window, k_cache, v_cache, k_params, v_params, out, stream);
      return;
    case 128:
      launch<T, C, 128>(qkv, positions, tile_seq, tile_first, tile_count, num_tiles, block_tables,
                        max_blocks_per_seq, heads, kv_heads, block_size, window, k_cache, v_cache, k_params, v_params,
                        out, stream);
      return;
    default:
      throw Error(ErrorKind::kInternal,
                  "tensor-core prefill attention has no kernel for head_dim " + std::to_string(head_dim));
  }
}

// Asked once per device (every forward's layers launch through here).
template <typename T, int kHeadDim>
int image_arch() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices] = {};  // 0: not asked yet; -1: no image; else the arch
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  if (device < kMaxDevices && known[device].load(std::memory_order_relaxed) != 0) {
    return std::max(0, known[device].load(std::memory_order_relaxed));
  }
  cudaFuncAttributes attributes{};
  int arch = -1;
  if (cudaFuncGetAttributes(&attributes, prefill_attention_mma_kernel<T, T, kHeadDim, kWarps, kStages, kMTiles, kKeys>) == cudaSuccess) {
    arch = std::min(attributes.ptxVersion, attributes.binaryVersion);
  } else {
    cudaGetLastError();  // no image for this device: not sticky, and the caller falls back
  }
  if (device < kMaxDevices) known[device].store(arch, std::memory_order_relaxed);
  return std::max(0, arch);
}

}  // namespace

template <typename T>
void launch_prefill_attention_mma(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                                  const int32_t* tile_first, const int32_t* tile_count, int64_t num_tiles,
                                  const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t heads,
                                  int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window,
                                  const T* k_cache, const T* v_cache, T* out, cudaStream_t stream) {
  launch_head_dim<T, T>(qkv, positions, tile_seq, tile_first, tile_count, num_tiles, block_tables, max_blocks_per_seq,
                        heads, kv_heads, head_dim, block_size, window, k_cache, v_cache, nullptr, nullptr, out,
                        stream);
}

template <typename T>
void launch_prefill_attention_mma_quantized(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                                            const int32_t* tile_first, const int32_t* tile_count,
                                            int64_t num_tiles, const int32_t* block_tables,
                                            int32_t max_blocks_per_seq, int64_t heads, int64_t kv_heads,
                                            int64_t head_dim, int64_t block_size, int64_t window,
                                            const QuantizedKvLayer& cache, T* out, cudaStream_t stream) {
  with_typed_codes(cache, [&](auto* k_codes, auto* v_codes) {
    launch_head_dim<T>(qkv, positions, tile_seq, tile_first, tile_count, num_tiles, block_tables, max_blocks_per_seq,
                       heads, kv_heads, head_dim, block_size, window, k_codes, v_codes, cache.k_params,
                       cache.v_params, out, stream);
  });
}

template <typename T>
int prefill_attention_mma_image_arch(int64_t head_dim) {
  switch (head_dim) {
    case 64: return image_arch<T, 64>();
    case 128: return image_arch<T, 128>();
    default: return 0;
  }
}

#define INSTANTIATE(T)                                                                                              \
  template void launch_prefill_attention_mma<T>(const T*, const int32_t*, const int32_t*, const int32_t*,          \
                                                const int32_t*, int64_t, const int32_t*, int32_t, int64_t, int64_t, \
                                                int64_t, int64_t, int64_t, const T*, const T*, T*, cudaStream_t);   \
  template void launch_prefill_attention_mma_quantized<T>(const T*, const int32_t*, const int32_t*,                \
                                                          const int32_t*, const int32_t*, int64_t, const int32_t*, \
                                                          int32_t, int64_t, int64_t, int64_t, int64_t, int64_t,    \
                                                          const QuantizedKvLayer&, T*, cudaStream_t);              \
  template int prefill_attention_mma_image_arch<T>(int64_t);
INSTANTIATE(__half)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
