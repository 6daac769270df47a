// The device side of the paged KV cache, as plain data the kernels understand.
//
// Memory for one layer's keys (and likewise values) is one tensor
//   [num_blocks, num_kv_heads, block_size, head_dim]
// A sequence's token at position p lives in block block_table[p / block_size],
// row p % block_size. Which blocks a sequence owns is host metadata (src/kv);
// kernels only read the block tables they are given.
//
// A quantized cache (LMDeploy's --quant-policy 8 or 4) holds codes instead,
// and beside them one (scale, zero) pair of f32 a row, a row being the
// head_dim values of one token's key (or value) in one KV head. With
// L = 2^bits - 1 levels (255, or 15):
//   scale = (max - min) / L, zero = min, code = rint((x - zero) / scale),
//   x ≈ code · scale + zero
// (scale 0 where every value of the row is the same: the codes are 0).
// 8-bit codes are bytes (u8); 4-bit codes are packed two a byte, element
// 2i in the low nibble (u4). A head_dim-128 row then takes 136 or 72 bytes
// instead of 256 in 16 bits.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tessera::backend {

// How a cache stores keys and values.
enum class KvCacheFormat {
  kCompute,  // in the backend's compute dtype
  kInt8,     // 8-bit codes with a scale and zero point a row (--quant-policy 8)
  kInt4,     // 4-bit codes, two a byte, with a scale and zero point a row (--quant-policy 4)
};

// Its name in logs: "compute dtype", "int8" or "int4".
const char* kv_cache_format_name(KvCacheFormat format);
// LMDeploy's --quant-policy: 8 -> kInt8, 4 -> kInt4, anything else kCompute.
KvCacheFormat kv_cache_format_for_policy(int quant_policy);
// Bits a code of a quantized format: 8 or 4 (0 for kCompute).
int kv_code_bits(KvCacheFormat format);

struct PagedKvLayer {
  PagedKvLayer() = default;
  PagedKvLayer(Tensor keys, Tensor values, Tensor key_params = {}, Tensor value_params = {})
      : keys(std::move(keys)), values(std::move(values)), key_params(std::move(key_params)),
        value_params(std::move(value_params)) {}

  Tensor keys;    // [num_blocks, num_kv_heads, block_size, head_dim]: compute dtype, or u8 / u4 codes
  Tensor values;  // [num_blocks, num_kv_heads, block_size, head_dim]: the same
  // Quantized only (undefined otherwise): [num_blocks, num_kv_heads, block_size, 2] f32 (scale, zero) of each row.
  Tensor key_params;
  Tensor value_params;

  bool quantized() const { return code_bits() != 0; }
  // 8 (u8 codes), 4 (u4 codes) or 0 (not quantized).
  int code_bits() const { return keys.dtype() == DType::kU8 ? 8 : keys.dtype() == DType::kU4 ? 4 : 0; }
};

struct PagedKvCache {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // One more block past num_blocks that no sequence owns, or -1: the padding
  // rows of a recorded decode graph (model/decode_graphs.h) write there.
  int64_t spare_block = -1;
  std::vector<PagedKvLayer> layers;

  // Bytes one block takes over all layers (keys and values, with their scales).
  size_t block_bytes() const;
};

// Where the new tokens of a step sit, shared by every layer of one forward.
// All vectors are host memory; a device backend uploads them once per step.
struct AttentionBatch {
  std::vector<int32_t> positions;          // [num_tokens] position of each new token in its sequence
  std::vector<int32_t> query_start;        // [num_seqs + 1] new tokens of sequence s: [query_start[s], query_start[s+1])
  std::vector<int32_t> block_tables;       // [num_seqs, max_blocks_per_seq] block ids, row-major
  int32_t max_blocks_per_seq = 0;
  int64_t sliding_window = 0;              // 0: attend to every earlier token

  int64_t num_seqs() const { return static_cast<int64_t>(query_start.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(positions.size()); }
};

}  // namespace tessera::backend
