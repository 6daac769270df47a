// Launchers of tessera's CUDA kernels: free functions of plain pointers and
// sizes, each the twin of a CPU kernel in backend/cpu/kernels.h (same layout,
// same meaning), templated on the storage type T (float, __half,
// __nv_bfloat16) with f32 arithmetic inside. All run on `stream`, none syncs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/row_sampling.h"

namespace tessera::backend::cuda {

// The PTX and binary architectures (10·major + minor) of the kernel image the
// runtime loaded for the current device (kernel_image.cu); false, both 0, when
// this build holds no image that runs on it.
bool loaded_kernel_image(int* ptx_arch, int* binary_arch);

// out [n, hidden] = table [vocab, hidden] rows ids [n] (ids already validated)
template <typename T>
void launch_embedding(const T* table, int64_t hidden, const int32_t* ids, int64_t n, T* out, cudaStream_t stream);

// out [n, hidden] = x / sqrt(mean(x²) + eps) * weight
template <typename T>
void launch_rms_norm(const T* x, const T* weight, int64_t n, int64_t hidden, float eps, T* out, cudaStream_t stream);

// Qwen3's q and k norms, in place: every q and k head of every token of
// qkv [n, (heads + 2 * kv_heads) * head_dim] is rms_norm'ed over head_dim by
// q_weight or k_weight [head_dim]; v is not touched.
template <typename T>
void launch_head_rms_norm(T* qkv, int64_t n, int64_t heads, int64_t kv_heads, int64_t head_dim, const T* q_weight,
                          const T* k_weight, float eps, cudaStream_t stream);

// residual += x (rounded to T, as a T-typed residual stream is); out = rms_norm(residual)
template <typename T>
void launch_add_rms_norm(T* residual, const T* x, const T* weight, int64_t n, int64_t hidden, float eps, T* out,
                         cudaStream_t stream);

// Per token t of sequence seq(t): rotate its q and k heads (rotate_half pairs) by
// positions[t] * inv_freq[seq, :] scaled by `scaling`, then copy k and v into the
// paged cache at block_tables[seq][pos / block_size], row pos % block_size.
//   qkv [n, (heads + 2 * kv_heads) * head_dim]; token_seq [n]; inv_freq [seqs, head_dim/2]
//   cache [blocks, kv_heads, block_size, head_dim]; both null: only the rotation
template <typename T>
void launch_rope_cache_write(T* qkv, const int32_t* positions, const int32_t* token_seq, const float* inv_freq,
                             float scaling, const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n,
                             int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block_size, T* k_cache,
                             T* v_cache, cudaStream_t stream);

// A quantized cache layer (backend/paged_kv.h) as the kernels take it.
//   k_codes/v_codes [blocks, kv_heads, block_size, head_dim · bits / 8] bytes:
//     8-bit codes, or 4-bit ones two a byte (element 2i in the low nibble)
//   k_params/v_params [blocks, kv_heads, block_size] (scale, zero) f32 pairs
struct QuantizedKvLayer {
  uint8_t* k_codes = nullptr;
  uint8_t* v_codes = nullptr;
  float2* k_params = nullptr;
  float2* v_params = nullptr;
  int bits = 8;  // 8 or 4
};

// The cache write of launch_rope_cache_write into a quantized cache: each
// new token's k and v rows of qkv (k already rotated; launch_rope_cache_write
// with null caches rotates in place) quantized as cpu::quantize_row does.
template <typename T>
void launch_quantized_cache_write(const T* qkv, const int32_t* positions, const int32_t* token_seq,
                                  const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n, int64_t heads,
                                  int64_t kv_heads, int64_t head_dim, int64_t block_size,
                                  const QuantizedKvLayer& cache, cudaStream_t stream);

// Causal GQA attention of every new token over keys [max(0, pos - window + 1), pos]
// of its sequence in the paged cache; window 0 means no window.
//   qkv [n, qkv_size] (q part read); out [n, heads * head_dim]
template <typename T>
void launch_paged_attention(const T* qkv, const int32_t* positions, const int32_t* token_seq,
                            const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t n, int64_t heads,
                            int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window, const T* k_cache,
                            const T* v_cache, T* out, cudaStream_t stream);

// How many pieces a decode step's key ranges may be cut into. The kernel cuts
// each sequence's range itself, from the length it reads on the device, into
// at most num_splits even pieces of at least 32 positions; tokens_per_split is
// the piece of the range the plan was made for (max_context).
struct DecodeSplits {
  int64_t tokens_per_split = 0;
  int64_t num_splits = 1;  // at most 128
};

// Enough splits for about two thread blocks per multiprocessor (at least 32
// positions each), covering `max_context` positions.
DecodeSplits plan_decode_splits(int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t max_context,
                                int64_t multiprocessors);

// int32 counters launch_decode_attention needs for `num_seqs` sequences
// (zeroed once when allocated; every launch leaves them zero).
int64_t decode_arrival_counters(int64_t num_seqs, int64_t heads, int64_t kv_heads);

// RoPE inside decode attention (launch_rope_cache_write's rotation, per
// sequence s: positions[s] · inv_freq [num_seqs, head_dim / 2], times
// scaling): q rotated where the kernel reads it, and the new token's k rotated
// and written into the cache with its v by the blocks whose piece holds it.
// inv_freq null: the q part is rotated and the cache holds the new token.
struct DecodeRope {
  const float* inv_freq = nullptr;
  float scaling = 1.0f;
};

// Split-K paged attention for a step of decode tokens only: sequence s has one
// new token, token s, at positions[s] (so token_seq is the identity). Same
// result as launch_paged_attention (after launch_rope_cache_write, with
// `rope`); one thread block reads a KV head's rows once for all its query
// heads (decode_attention.cu says how).
//   qkv [num_seqs, qkv_size]; out [num_seqs, heads * head_dim]
//   partial [num_seqs, heads, num_splits, head_dim + 1] f32 and
//   arrivals [decode_arrival_counters(...)] int32 (both unused with one split)
template <typename T>
void launch_decode_attention(const T* qkv, const int32_t* positions, const int32_t* block_tables,
                             int32_t max_blocks_per_seq, int64_t num_seqs, int64_t heads, int64_t kv_heads,
                             int64_t head_dim, int64_t block_size, int64_t window, const DecodeSplits& splits,
                             T* k_cache, T* v_cache, float* partial, int32_t* arrivals, T* out, cudaStream_t stream,
                             const DecodeRope& rope = {});

// The same attention for prefill chunks: query tiles of up to 64 consecutive new
// tokens of one sequence (tile_seq/tile_first/tile_count [num_tiles]) share
// every K/V row they load. Faster than launch_paged_attention whenever a
// sequence brings more than a few new tokens.
template <typename T>
void launch_prefill_attention(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                              const int32_t* tile_first, const int32_t* tile_count, int64_t num_tiles,
                              const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t heads,
                              int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window,
                              const T* k_cache, const T* v_cache, T* out, cudaStream_t stream);

// launch_decode_attention over a quantized cache (no fused RoPE: the step's
// rows are written by launch_quantized_cache_write first). Rows are
// dequantized as they are loaded.
template <typename T>
void launch_decode_attention_quantized(const T* qkv, const int32_t* positions, const int32_t* block_tables,
                                       int32_t max_blocks_per_seq, int64_t num_seqs, int64_t heads,
                                       int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window,
                                       const DecodeSplits& splits, const QuantizedKvLayer& cache, float* partial,
                                       int32_t* arrivals, T* out, cudaStream_t stream);

// launch_prefill_attention over a quantized cache, dequantizing each K/V row
// as it is staged (any step: prefill chunks and decode tokens): the
// tensor-core kernel where launch_prefill_attention would take it, else the
// scalar one.
template <typename T>
void launch_prefill_attention_quantized(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                                        const int32_t* tile_first, const int32_t* tile_count, int64_t num_tiles,
                                        const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t heads,
                                        int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window,
                                        const QuantizedKvLayer& cache, T* out, cudaStream_t stream);

// The tensor-core twin of launch_prefill_attention (mma.sync, flash-attention-2
// style; attention_prefill_mma.cu), for T = __half or __nv_bfloat16 and head_dim
// 64 or 128 on images built for compute_80 or newer. Same arguments, same tiles.
template <typename T>
void launch_prefill_attention_mma(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                                  const int32_t* tile_first, const int32_t* tile_count, int64_t num_tiles,
                                  const int32_t* block_tables, int32_t max_blocks_per_seq, int64_t heads,
                                  int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window,
                                  const T* k_cache, const T* v_cache, T* out, cudaStream_t stream);

// launch_prefill_attention_mma over a quantized cache (rows dequantized to T
// as they are staged).
template <typename T>
void launch_prefill_attention_mma_quantized(const T* qkv, const int32_t* positions, const int32_t* tile_seq,
                                            const int32_t* tile_first, const int32_t* tile_count,
                                            int64_t num_tiles, const int32_t* block_tables,
                                            int32_t max_blocks_per_seq, int64_t heads, int64_t kv_heads,
                                            int64_t head_dim, int64_t block_size, int64_t window,
                                            const QuantizedKvLayer& cache, T* out, cudaStream_t stream);

// The architecture of the code the CUDA runtime loaded on the current device for
// that kernel, min(PTX version, binary version) as 10·major + minor (75, 90);
// 0 when (T, head_dim) has no such kernel or no image of it loads here.
template <typename T>
int prefill_attention_mma_image_arch(int64_t head_dim);

// out [n, inter] = silu(gate_up[:, :inter]) * gate_up[:, inter:]
template <typename T>
void launch_silu_mul(const T* gate_up, int64_t n, int64_t inter, T* out, cudaStream_t stream);

// x [count] += y
template <typename T>
void launch_add(T* x, const T* y, int64_t count, cudaStream_t stream);

// y [m, n] += bias [n]
template <typename T>
void launch_add_bias(T* y, const T* bias, int64_t m, int64_t n, cudaStream_t stream);

// out [rows, width] = x[rows[i], :]
template <typename T>
void launch_gather_rows(const T* x, const int32_t* rows, int64_t count, int64_t width, T* out, cudaStream_t stream);

// logits [rows, vocab] f32: each edit applied to its row's logit (row_sampling.h; ids validated)
void launch_apply_logit_edits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t count,
                              cudaStream_t stream);

// logits [rows, vocab] f32: in each of rows [count], -inf where its run of
// bits [count][ceil(vocab / 64)] is clear (SamplingBatch::allowed; rows validated)
void launch_apply_allowed(float* logits, int64_t vocab, const int32_t* rows, const uint64_t* bits, int64_t count,
                          cudaStream_t stream);

// ids [m] = the token sampled from each row of logits [m, vocab] f32 by rows [m] (row_sampling.h)
void launch_sample_rows(const float* logits, int64_t m, int64_t vocab, const SamplingRow* rows, int32_t* ids,
                        cudaStream_t stream);

// out [count] f32 = in [count] T
template <typename T>
void launch_to_f32(const T* in, int64_t count, float* out, cudaStream_t stream);

}  // namespace tessera::backend::cuda
