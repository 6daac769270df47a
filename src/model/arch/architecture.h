// Architecture: how one checkpoint family maps onto tessera's canonical weights.
//
// Canonical weights (what layers and kernels see), per layer L:
//   layers.L.attn_norm  [hidden]
//   layers.L.qkv        [(num_heads + 2 * num_kv_heads) * head_dim, hidden]   rows q | k | v
//   layers.L.qkv_bias   [(num_heads + 2 * num_kv_heads) * head_dim]           (Qwen2)
//   layers.L.q_norm     [head_dim]   RMSNorm of each q head, before RoPE     (Qwen3)
//   layers.L.k_norm     [head_dim]   and of each k head                       (Qwen3)
//   layers.L.o          [hidden, num_heads * head_dim]
//   layers.L.ffn_norm   [hidden]
//   layers.L.gate_up    [2 * intermediate, hidden]                           rows gate | up
//   layers.L.down       [hidden, intermediate]
// and embed [vocab, hidden], final_norm [hidden], lm_head [vocab, hidden].
//
// Each architecture is a table of sources (nano-vllm's idea): a checkpoint name
// pattern, the canonical weight it fills and which part of it. The table also
// says how each canonical weight is split for tensor parallelism. Adding an
// architecture is adding a file in this folder; nothing outside it branches on
// the architecture.
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.h"

namespace tessera::model {

// Where a checkpoint tensor lands inside its canonical weight.
enum class WeightPart {
  kWhole,         // the checkpoint tensor is the canonical weight
  kQ, kK, kV,     // rows of qkv (or of qkv_bias)
  kGate, kUp,     // rows of gate_up
  kPackedWqkv,    // InternLM2's wqkv: num_kv_heads groups of [group q heads, 1 k head, 1 v head]
};

// How a canonical weight is divided between tensor-parallel ranks.
enum class TpSplit {
  kReplicated,    // every rank holds all of it (norms)
  kColumnQkv,     // rows split by heads inside each of q, k, v (k/v replicated when kv_heads < tp)
  kColumnGateUp,  // rows split inside each of gate and up
  kRow,           // columns split (o, down); the partial outputs are all-reduced
  kVocab,         // rows split by vocabulary (embedding, lm_head)
};

struct WeightSource {
  std::string checkpoint_pattern;  // "{L}" stands for the layer index
  std::string canonical_pattern;   // "layers.{L}.qkv"
  WeightPart part = WeightPart::kWhole;
  bool optional = false;           // absent in some checkpoints (e.g. lm_head when tied)
};

struct Architecture {
  std::string name;                     // config.json "architectures"[0]
  std::vector<WeightSource> sources;
  bool qkv_bias = false;                // the attention projection has q/k/v biases
  bool head_norms = false;              // q and k heads have an RMSNorm each before RoPE (Qwen3)
};

// The architecture's traits config.json does not state, into `spec`.
void apply_architecture(ModelSpec& spec, const Architecture& arch);

// The architecture named by spec.architecture. Throws Error(kUnsupported)
// listing the supported names when there is none.
const Architecture& find_architecture(const std::string& name);
std::vector<std::string> supported_architectures();

// The split of a canonical weight ("layers.3.qkv" -> kColumnQkv).
TpSplit tp_split_of(const std::string& canonical_name);

// Sources shared by the Llama family (Llama, Mistral, Qwen2, Qwen3, InternLM3): HF's llama names.
std::vector<WeightSource> llama_family_sources(bool qkv_bias);

// Each file of this folder defines one of these.
Architecture llama_architecture();
Architecture mistral_architecture();
Architecture qwen2_architecture();
Architecture internlm2_architecture();
Architecture internlm3_architecture();
Architecture qwen3_architecture();
Architecture phi3_architecture();

}  // namespace tessera::model
