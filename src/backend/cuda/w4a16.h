// 4-bit weight, 16-bit activation linear layers (AWQ): launchers of plain
// pointers, the weight in backend/quantized_weight.h's canonical layout
//   qweight u32 [n, k / 8] (inputs 8w + i in bits 4i .. 4i + 3), scales f16
//   [n, k / g], zeros u8 [n, k / g]; W[o][i] = (q - zero) * scale
// T is the activation type (float, __half, __nv_bfloat16); arithmetic is f32.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::backend::cuda {

// Rows of x up to which the GEMV kernel runs (it reads the weights once for
// every row); more rows dequantize into a 16-bit scratch for cuBLASLt.
inline constexpr int64_t kW4GemvMaxRows = 16;

// out [m, n] = x [m, k] · Wᵀ (+ bias [n], may be null), or out += that with
// accumulate (the residual stream); m <= kW4GemvMaxRows, k % 32 == 0,
// g % 32 == 0, x 16-byte aligned.
template <typename T>
void launch_w4a16_gemv(const T* x, const uint32_t* qweight, const __half* scales, const uint8_t* zeros, const T* bias,
                       int64_t m, int64_t n, int64_t k, int64_t group_size, T* out, cudaStream_t stream,
                       bool accumulate = false);

// w [n, k] = W in T (for cuBLASLt at larger m).
template <typename T>
void launch_w4_dequantize(const uint32_t* qweight, const __half* scales, const uint8_t* zeros, int64_t n, int64_t k,
                          int64_t group_size, T* w, cudaStream_t stream);

// The tensor-core path (w4a16_tiles.cu: sm_80 and newer, 16-bit activations),
// on weights repacked at upload into its operand order:
//   tiles      u32 [ceil(n / 16) * 16 * k / 8]   (w4_tile_words)
//   scale_zero u32 [k / g, ceil(n / 16) * 16]    scale's f16 bits | zero << 16
// Shapes it takes: k % 64 == 0, g % 64 == 0.
bool w4_tiles_supported(int64_t k, int64_t group_size);
int64_t w4_tile_words(int64_t n, int64_t k);
int64_t w4_scale_zero_words(int64_t n, int64_t k, int64_t group_size);
inline constexpr int64_t kW4MmaMaxRows = 64;

// Paired tiles, for a weight whose rows are two halves gate | up (an MLP's
// gate_up, n % 16 == 0): tile p holds gate rows 8p .. 8p + 7 as its rows 0-7
// and the matching up rows n / 2 + 8p .. as its rows 8-15, so the lane that
// holds a gate row's sum holds its up row's too (w4a16_tiles.cu) and a
// product can store silu(gate) · up. Row r of such tiles is canonical row
// paired_row(r, n).
__host__ __device__ inline int64_t paired_row(int64_t r, int64_t n) {
  const int64_t tile = r / 16, in_tile = r % 16;
  return in_tile < 8 ? tile * 8 + in_tile : n / 2 + tile * 8 + in_tile - 8;
}
inline bool w4_pairs_supported(int64_t n) { return n > 0 && n % 16 == 0; }

// How a tensor-core product stores its rows.
enum class W4Store : int {
  kRows,        // out [m, n], tile row r is output r
  kPairedRows,  // paired tiles: out [m, n] in gate | up order
  kSiluMul,     // paired tiles: out [m, n / 2] = silu(gate) · up, each rounded to T first as
                // silu_mul reads them from a stored product (no accumulate)
};

// RMSNorm across two tensor-core products of a decode step (up to
// kW4NormRows rows), so that no norm kernel runs between them:
// - ahead_weight (the producer, with accumulate: out is the residual stream
//   r): the product also stores ahead_formed [m, n] = r ∘ ahead_weight and
//   ahead_sums [m, n / 16], each token's sum of r² over each 16-row tile of
//   r as stored, summed in a fixed order (no float atomics: the same bits
//   every run);
// - input_sums (the consumer, whose x is such an r ∘ g, k = the producer's
//   n): its sums are scaled by each token's 1 / rms(r) = rsqrt(Σ input_sums
//   / k + eps) before the bias: the product of RMSNorm(r) up to rounding (r ∘ g
//   is rounded to T before the scale, the norm's op rounds after it).
inline constexpr int64_t kW4NormRows = 16;
struct W4Norms {
  const float* input_sums = nullptr;  // [m, k / 16]
  float eps = 0.0f;
  const void* ahead_weight = nullptr;  // T [n]
  void* ahead_formed = nullptr;        // T [m, n]
  float* ahead_sums = nullptr;         // [m, n / 16]
};

// Throws Error(kInternal) naming `what` where `store` and `norms` do not
// fit the product: paired stores need n % 16 == 0, kSiluMul stores no sum
// into out; norms need m <= kW4NormRows, and an ahead norm plain rows
// (kRows) added into the residual stream (accumulate), all three pointers.
void check_w4_store(W4Store store, int64_t m, int64_t n, bool accumulate, const W4Norms& norms, const char* what);

// Canonical layout -> tiles and scale_zero (device pointers); paired: the
// paired tiles above.
void launch_w4_tile(const uint32_t* qweight, const __half* scales, const uint8_t* zeros, int64_t n, int64_t k,
                    int64_t group_size, uint32_t* tiles, uint32_t* scale_zero, cudaStream_t stream,
                    bool paired = false);

// out [m, n] = x [m, k] · Wᵀ (+ bias), or out += that with accumulate;
// m <= kW4MmaMaxRows, x 16-byte aligned; `store` as W4Store says and
// `norms` as W4Norms (every tensor-core launcher below takes them).
// row_warps (1, 2, 4 or 8) of a block's 8 warps take neighbouring 16-row tiles
// and share activations; the rest split k. More row warps re-read the
// activations less but make fewer blocks. The weights reach the tensor cores
// either in batches of register loads or through cp.async stages in shared
// memory, or (kGroupSums, w4a16_group_sums.cu: launch_w4a16_group_sums)
// in register batches with the zero point taken out once a group against the
// activations' group sums, or (kWideRows, w4a16_wide.cu: launch_w4a16_wide)
// with two row tiles a warp. The caller times the choices.
enum class W4Pipeline { kRegisterBatches, kRegisterDouble, kSharedStages, kGroupSums, kWideRows };
template <typename T>
void launch_w4a16_mma(const T* x, const uint32_t* tiles, const uint32_t* scale_zero, const T* bias, int64_t m,
                      int64_t n, int64_t k, int64_t group_size, int row_warps, W4Pipeline pipeline, T* out,
                      cudaStream_t stream, bool accumulate = false, W4Store store = W4Store::kRows,
                      const W4Norms& norms = {});

// The group-sum kernels (w4a16_group_sums.cu; W4Pipeline::kGroupSums): at
// m <= 8 rows, groups of 64 or 128 inputs, x and its group sums within 39 KB
// of shared memory (one row: k up to about 18,000). Variants by the warps of
// a block and those of them on neighbouring row tiles (the rest split k);
// the caller times them.
struct W4GroupSumsKernel {
  int block_warps, row_warps;
};
inline constexpr W4GroupSumsKernel kW4GroupSumsKernels[] = {{8, 1}, {8, 2}, {16, 1}};
bool w4_group_sums_supported(int64_t m, int64_t k, int64_t group_size);
// kernel: an index of kW4GroupSumsKernels.
template <typename T>
void launch_w4a16_group_sums(const T* x, const uint32_t* tiles, const uint32_t* scale_zero, const T* bias, int64_t m,
                             int64_t n, int64_t k, int64_t group_size, int kernel, T* out, cudaStream_t stream,
                             bool accumulate, W4Store store = W4Store::kRows, const W4Norms& norms = {});

// The kernels of w4a16_wide.cu (W4Pipeline::kWideRows): each warp takes two
// neighbouring 16-row tiles and reads a chunk of activations once for both;
// row_warps (1 or 2) of a block's 8 warps take neighbouring pairs, the rest
// split k. m <= kW4MmaMaxRows.
bool w4_wide_supported(int64_t m, int row_warps);
template <typename T>
void launch_w4a16_wide(const T* x, const uint32_t* tiles, const uint32_t* scale_zero, const T* bias, int64_t m,
                       int64_t n, int64_t k, int64_t group_size, int row_warps, T* out, cudaStream_t stream,
                       bool accumulate, W4Store store = W4Store::kRows, const W4Norms& norms = {});

// w [n, k] = W from the tiles (for cuBLASLt at more rows), rows in canonical
// order (paired: the tiles are paired).
template <typename T>
void launch_w4_dequantize_tiles(const uint32_t* tiles, const uint32_t* scale_zero, int64_t n, int64_t k,
                                int64_t group_size, T* w, cudaStream_t stream, bool paired = false);

}  // namespace tessera::backend::cuda
