// The 4-bit (AWQ) product on Hopper's warpgroup tensor cores: CUTLASS's
// sm_90a mixed-input GEMM (w4a16_sm90.cu), for decode batches past the
// mma.sync kernels' best rows and for prefill, where those kernels (one
// 8-token tile an mma.sync, one block an SM at 64 rows) or dequantize +
// cuBLASLt (16-bit weights written and read again every product) are slower.
// It reads its own copy of the weights, made at upload from the canonical
// layout (backend/quantized_weight.h):
//   packed  u4 [n, k] in CUTLASS's reordered operand order (each thread's
//           values of a k-block contiguous, nibbles 0,2,4,6,1,3,5,7), n · k / 2 bytes
//   scales  T  [k / g, n]
//   zeros   T  [k / g, n]   = -zero · scale, so W = q · scale + zeros
// T is __half or __nv_bfloat16 (the activations' type); the products
// accumulate in f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera::backend::cuda {

// True when this build holds the kernels (its architectures include 90 and
// the CUTLASS headers were found at configure time).
bool w4_sm90_built();

// Shapes the kernels take: k % 64 == 0, g % 64 == 0 (a group spans whole
// k-blocks of 64), n % 128 == 0: whole tiles of weight rows. (The reordered
// layout tiles 16 rows, so a ragged last 16 would lie past the copy's
// n · k / 2 bytes; rows of 24, 264 and 1000 gave wrong products on an H100,
// and only multiples of 128 were seen right. Models' rows are.)
bool w4_sm90_supported(int64_t n, int64_t k, int64_t group_size);

// Token rows a thread block takes (the GEMM's N tile; its M tile is 128
// weight rows, two consumer warpgroups).
inline constexpr int kW4Sm90TokenTiles[] = {16, 32, 64, 128};

// How the output tiles (128 weight rows by token_tile tokens) are dealt to
// the SMs, by `splits`:
//   kW4Sm90WholeTiles  one thread block a tile over all of k (no workspace);
//   kW4Sm90StreamK     CUTLASS's stream-K: the k-steps of all tiles dealt
//                      evenly to one block an SM;
//   2, 4               each tile's k in that many parts.
// Few tiles with a long k (the o and down projections at 64-256 rows: 32
// tiles on 132 SMs, each block a chain of 64-224 k-steps) leave most SMs idle
// when whole. Parts of a tile meet through a workspace
// (w4a16_sm90_workspace_bytes), in k's order: the same bits every call.
// The caller times the variants.
struct W4Sm90Variant {
  int token_tile;
  int splits;
};
inline constexpr int kW4Sm90WholeTiles = 1, kW4Sm90StreamK = 0;
inline constexpr int kW4Sm90Splits[] = {kW4Sm90WholeTiles, kW4Sm90StreamK, 2, 4};

// Canonical layout (device pointers) -> the three tensors above.
template <typename T>
void launch_w4_sm90_pack(const uint32_t* qweight, const __half* scales, const uint8_t* zeros, int64_t n, int64_t k,
                         int64_t group_size, uint8_t* packed, T* gemm_scales, T* gemm_zeros, cudaStream_t stream);

// Device bytes the variant's workspace takes for this shape (0 for whole
// tiles).
template <typename T>
size_t w4a16_sm90_workspace_bytes(int64_t m, int64_t n, int64_t k, int64_t group_size, W4Sm90Variant variant);

// out [m, n] = x [m, k] · Wᵀ, or out += that with accumulate; x and out
// 16-byte aligned; workspace: at least w4a16_sm90_workspace_bytes, stream-
// ordered, any contents (the launch clears the locks it uses). Compute
// capability 9.0 only; throws Error(kInternal) where CUTLASS cannot run the
// shape.
template <typename T>
void launch_w4a16_sm90(const T* x, const uint8_t* packed, const T* gemm_scales, const T* gemm_zeros, int64_t m,
                       int64_t n, int64_t k, int64_t group_size, W4Sm90Variant variant, void* workspace,
                       size_t workspace_bytes, T* out, cudaStream_t stream, bool accumulate);

// The launchers' instantiations for one T, in w4a16_sm90.cu and in
// w4a16_sm90_absent.cc (the build without the kernels).
#define TESSERA_W4_SM90_INSTANTIATE(T)                                                                              \
  template void launch_w4_sm90_pack<T>(const uint32_t*, const __half*, const uint8_t*, int64_t, int64_t, int64_t,  \
                                       uint8_t*, T*, T*, cudaStream_t);                                            \
  template size_t w4a16_sm90_workspace_bytes<T>(int64_t, int64_t, int64_t, int64_t, W4Sm90Variant);               \
  template void launch_w4a16_sm90<T>(const T*, const uint8_t*, const T*, const T*, int64_t, int64_t, int64_t,      \
                                     int64_t, W4Sm90Variant, void*, size_t, T*, cudaStream_t, bool);

}  // namespace tessera::backend::cuda
