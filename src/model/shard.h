// Tensor-parallel shards: which part of the model one rank holds, and the
// slicing of each canonical weight by its split (arch/architecture.h,
// tp_split_of):
//   qkv, qkv_bias  column-parallel: the rank's query heads of q, and its KV
//                  heads of k and v. When num_kv_heads < tp each KV head is
//                  replicated on the tp / num_kv_heads ranks whose query heads
//                  use it, so every rank holds one.
//   gate_up        column-parallel inside each of gate and up: the rank's range
//                  of intermediate units (uneven when tp does not divide it).
//   o, down        row-parallel: the matching input columns; the partial outputs
//                  are all-reduced.
//   lm_head        vocab-parallel: ceil(vocab / tp) rows per rank, the last
//                  padded with zero rows so the logits gather in equal parts;
//                  the padding columns are dropped after the all-gather.
//   embed          replicated, although the table allows vocab-parallel: a
//                  lookup costs nothing next to the all-reduce of
//                  [num_tokens, hidden] a vocab-parallel embedding needs.
//   norms          replicated.
// With tp = 1 the shard is the whole model and shard_weight returns its input.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model_spec.h"

namespace tessera::model {

struct TpShard {
  int rank = 0;
  int world_size = 1;
  int64_t head_begin = 0;          // query heads [head_begin, head_begin + num_heads)
  int64_t num_heads = 0;
  int64_t kv_head_begin = 0;       // KV heads [kv_head_begin, kv_head_begin + num_kv_heads)
  int64_t num_kv_heads = 0;
  int64_t intermediate_begin = 0;  // MLP units [intermediate_begin, + intermediate_size)
  int64_t intermediate_size = 0;
  int64_t vocab_begin = 0;         // LM head rows [vocab_begin, vocab_begin + vocab_rows), zero past the vocabulary
  int64_t vocab_rows = 0;          // ceil(vocab / world_size), the same on every rank

  int64_t q_size(int64_t head_dim) const { return num_heads * head_dim; }
  int64_t qkv_size(int64_t head_dim) const { return (num_heads + 2 * num_kv_heads) * head_dim; }
  // This rank's part of ModelSpec::linear_params_per_layer.
  int64_t linear_params_per_layer(const ModelSpec& spec) const {
    return (qkv_size(spec.head_dim) + q_size(spec.head_dim) + 3 * intermediate_size) * spec.hidden_size;
  }
};

// The tensor-parallel sizes this model can be split into: tp divides the query
// heads, and tp divides the KV heads or the KV heads divide tp (so each rank's
// query heads share KV heads in the model's ratio).
std::vector<int> valid_tp_sizes(const ModelSpec& spec);

// Throws Error(kInvalidArgument) naming the heads and listing the sizes that
// work when `tp` is not one of them.
void check_tp_size(const ModelSpec& spec, int tp);

// Rank `rank` of `world_size` (checked with check_tp_size).
TpShard make_tp_shard(const ModelSpec& spec, int rank, int world_size);

// Rank's part of canonical weight `name` (host f32 or any host dtype,
// contiguous), by tp_split_of(name). A new contiguous host tensor, or `full`
// itself when it is not split (replicated, or tp = 1).
Tensor shard_weight(const ModelSpec& spec, const TpShard& shard, const std::string& name, const Tensor& full);

}  // namespace tessera::model
