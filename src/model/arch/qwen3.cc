// Qwen3ForCausalLM: Llama's names and layers (no biases), plus an RMSNorm of
// each q head and each k head before RoPE (self_attn.q_norm, k_norm: one
// weight of head_dim each, shared by the heads and replicated across
// tensor-parallel ranks).
#include "model/arch/architecture.h"

namespace tessera::model {

Architecture qwen3_architecture() {
  std::vector<WeightSource> sources = llama_family_sources(false);
  sources.push_back({"model.layers.{L}.self_attn.q_norm.weight", "layers.{L}.q_norm"});
  sources.push_back({"model.layers.{L}.self_attn.k_norm.weight", "layers.{L}.k_norm"});
  return {"Qwen3ForCausalLM", std::move(sources), false, true};
}

}  // namespace tessera::model
