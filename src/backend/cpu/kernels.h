// Reference CPU kernels: free functions of plain pointers and sizes, f32 in and
// out, OpenMP over the outer dimension. They are the judges of every faster
// kernel, so they stay plain: no tiling, no intrinsics. Row-major throughout.
#pragma once

#include <cstdint>

namespace tessera::backend::cpu {

// out [n, hidden] = table [vocab, hidden] rows ids [n]; an id outside [0, vocab) throws.
void embedding(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n, float* out);

// out [n, hidden] = x / sqrt(mean(x²) + eps) * weight [hidden]
void rms_norm(const float* x, const float* weight, int64_t n, int64_t hidden, float eps, float* out);

// Each of the first num_heads + num_kv_heads heads of every row [n, row_size],
// in place: rms_norm over head_dim by q_weight (q heads) or k_weight (k heads).
void head_rms_norm(float* qkv, int64_t n, int64_t row_size, int64_t num_heads, int64_t num_kv_heads,
                   int64_t head_dim, const float* q_weight, const float* k_weight, float eps);
// residual [n, hidden] += x; out = rms_norm(residual)
void add_rms_norm(float* residual, const float* x, const float* weight, int64_t n, int64_t hidden, float eps,
                  float* out);

// y [m, n] = x [m, k] · w [n, k]ᵀ + bias [n] (bias may be null). OpenBLAS sgemm:
// a tuned, well-kept GEMM beats a hand-blocked one and keeps this file readable.
void linear(const float* x, const float* w, const float* bias, int64_t m, int64_t n, int64_t k, float* y);

// Rotates one head vector x [head_dim] in place by angle position · inv_freq[i]
// for pairs (i, i + head_dim/2), then scales by `scaling` (YaRN's mscale).
void rope_rotate(float* x, int64_t head_dim, int32_t position, const float* inv_freq, float scaling);

// Causal attention of one query head over keys [0, last] of a paged cache.
//   q [head_dim]; k_cache/v_cache [num_blocks, num_kv_heads, block_size, head_dim]
//   block_table [ceil((last + 1) / block_size)]; keys with position < first are skipped
//   (sliding window); out [head_dim]
void attend_one(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_table,
                int64_t num_kv_heads, int64_t kv_head, int64_t block_size, int64_t head_dim, int64_t first,
                int64_t last, float* out);

// Causal attention of one query head over a quantized cache (paged_kv.h) of
// `bits`-bit codes (8 or 4):
//   k_codes/v_codes [num_blocks, num_kv_heads, block_size, head_dim · bits / 8] bytes,
//   k_params/v_params [num_blocks, num_kv_heads, block_size, 2] (scale, zero);
// the rest as attend_one. Each row is dequantized to f32 first.
void attend_one_quantized(const float* q, int bits, const uint8_t* k_codes, const float* k_params,
                          const uint8_t* v_codes, const float* v_params, const int32_t* block_table,
                          int64_t num_kv_heads, int64_t kv_head, int64_t block_size, int64_t head_dim, int64_t first,
                          int64_t last, float* out);

// One row x [n] as `bits`-bit codes (8: a byte each; 4: two a byte, element
// 2i in the low nibble, n even) and params [2] = (scale, zero), with
// L = 2^bits - 1: scale = (max - min) / L, zero = min,
// code = rint((x - zero) / scale) clamped to [0, L], 0 where scale is 0.
void quantize_row(const float* x, int64_t n, int bits, uint8_t* codes, float* params);
// x [n] = code · scale + zero.
void dequantize_row(const uint8_t* codes, const float* params, int64_t n, int bits, float* x);

// out [n, inter] = silu(gate_up[:, :inter]) * gate_up[:, inter:]
void silu_mul(const float* gate_up, int64_t n, int64_t inter, float* out);

}  // namespace tessera::backend::cpu
