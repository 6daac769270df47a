// The canonical weights of a model, on one backend, in its compute dtype.
// Names and layouts: see arch/architecture.h. Under tensor parallelism a
// rank's ModelWeights hold its shard (shard.h): the shapes below with
// num_heads, num_kv_heads, intermediate and vocab of the TpShard.
#pragma once

#include <cstdint>
#include <functional>
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
  Tensor q_norm;     // [head_dim] or undefined: Qwen3's RMSNorm of each q head
  Tensor k_norm;     // [head_dim] or undefined: and of each k head
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

// The loader moves the weights one part at a time, so the host holds one
// layer in f32 at once, not the whole model (twice a 16-bit checkpoint's
// size: 80 GB for a 20B model). A part is a layer index or kGlobalWeights
// (embed, final_norm, lm_head).
inline constexpr int64_t kGlobalWeights = -1;

// The canonical weights of one part, made when asked for.
using WeightParts = std::function<CanonicalWeights(int64_t part)>;

// Assembles one part's canonical weights from a checkpoint using the
// architecture's table, checking every shape and dtype against the spec.
// Throws Error(kInvalidArgument) naming the file and the tensor on any mismatch.
CanonicalWeights assemble_part(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint,
                               int64_t part);

// Every part at once: the checked host weights of the whole model (tools, tests).
CanonicalWeights assemble_weights(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint);

// Rank `shard`'s part of the weights uploaded to `backend` (the whole model
// when shard.world_size == 1), asking `parts` for one part at a time and
// dropping it once uploaded. With `log_progress`, a line every few seconds
// (layers done, bytes uploaded). `parts` may be called by several ranks at once.
ModelWeights upload_weights(const ModelSpec& spec, const WeightParts& parts, const TpShard& shard,
                            backend::Backend& backend, bool log_progress = false);

// Streams a checkpoint onto one backend: assemble_part and upload_weights, part by part.
ModelWeights load_weights(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint,
                          backend::Backend& backend);

}  // namespace tessera::model
