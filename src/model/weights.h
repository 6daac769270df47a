// The canonical weights of a model, on one backend, in its compute dtype.
// Names and layouts: see arch/architecture.h.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/arch/architecture.h"
#include "model/loader/checkpoint.h"
#include "model/model_spec.h"

namespace tessera::model {

struct LayerWeights {
  Tensor attn_norm;  // [hidden]
  Tensor qkv;        // [qkv_size, hidden]       rows q | k | v
  Tensor qkv_bias;   // [qkv_size] or undefined
  Tensor o;          // [hidden, q_size]
  Tensor ffn_norm;   // [hidden]
  Tensor gate_up;    // [2 * intermediate, hidden] rows gate | up
  Tensor down;       // [hidden, intermediate]
};

struct ModelWeights {
  Tensor embed;       // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [hidden]
  Tensor lm_head;     // [vocab, hidden]; the same tensor as embed when tied
};

// Assembles the canonical weights from a checkpoint using the architecture's
// table, checking every shape and dtype against the spec. Throws
// Error(kInvalidArgument) naming the file and the tensor on any mismatch.
ModelWeights load_weights(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint,
                          backend::Backend& backend);

}  // namespace tessera::model
