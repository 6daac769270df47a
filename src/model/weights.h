// The canonical weights of a model, on one backend, in its compute dtype.
// Names and layouts: see arch/architecture.h. Under tensor parallelism a
// rank's ModelWeights hold its shard (shard.h): the shapes below with
// num_heads, num_kv_heads, intermediate and vocab of the TpShard.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/arch/architecture.h"
#include "model/loader/checkpoint.h"
#include "model/model_spec.h"
#include "model/shard.h"

namespace tessera::model {

struct LayerWeights {
  Tensor attn_norm;  // [hidden]
  Tensor qkv;        // [qkv_size, hidden]       rows q | k | v
  Tensor qkv_bias;   // [qkv_size] or undefined
  Tensor o;          // [hidden, q_size]
  Tensor ffn_norm;   // [hidden]
  Tensor gate_up;    // [2 * intermediate, hidden] rows gate | up
  Tensor down;       // [hidden, intermediate]
  // 4-bit linears (AWQ) on a backend that keeps them packed: the same shapes
  // as out_features x in_features; the 16-bit tensor above is then undefined.
  backend::QuantizedWeight qkv_w4, o_w4, gate_up_w4, down_w4;
};

struct ModelWeights {
  Tensor embed;       // [vocab, hidden] (replicated under tensor parallelism)
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [hidden]
  Tensor lm_head;     // [vocab, hidden]; the same tensor as embed when tied (tp = 1)
                      // under tensor parallelism [shard.vocab_rows, hidden]
};

// Canonical weights by name ("embed", "layers.3.qkv", ...) as host f32
// tensors, assembled from the checkpoint, before any upload or split. A 4-bit
// linear (AWQ) is three entries instead of one: "layers.3.qkv.qweight" (i32),
// ".scales" (f16) and ".zeros" (u8), in backend/quantized_weight.h's layout.
using CanonicalWeights = std::map<std::string, Tensor>;

// Assembles the canonical weights from a checkpoint using the architecture's
// table, checking every shape and dtype against the spec. Throws
// Error(kInvalidArgument) naming the file and the tensor on any mismatch.
ModelWeights load_weights(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint,
                          backend::Backend& backend);

// The first half of load_weights: the checked host weights of the whole model.
CanonicalWeights assemble_weights(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint);

// The second half: rank `shard`'s part of `weights` uploaded to `backend`
// (the whole model when shard.world_size == 1). `weights` is only read, so
// every rank may upload from the same map at once.
ModelWeights upload_weights(const ModelSpec& spec, const CanonicalWeights& weights, const TpShard& shard,
                            backend::Backend& backend);

}  // namespace tessera::model
