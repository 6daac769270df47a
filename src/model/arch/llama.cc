// LlamaForCausalLM (Llama 2, 3, 3.1): the reference layout the others vary.
#include "model/arch/architecture.h"

namespace tessera::model {

std::vector<WeightSource> llama_family_sources(bool qkv_bias) {
  std::vector<WeightSource> sources = {
      {"model.embed_tokens.weight", "embed"},
      {"model.norm.weight", "final_norm"},
      {"lm_head.weight", "lm_head", WeightPart::kWhole, /*optional=*/true},
      {"model.layers.{L}.input_layernorm.weight", "layers.{L}.attn_norm"},
      {"model.layers.{L}.self_attn.q_proj.weight", "layers.{L}.qkv", WeightPart::kQ},
      {"model.layers.{L}.self_attn.k_proj.weight", "layers.{L}.qkv", WeightPart::kK},
      {"model.layers.{L}.self_attn.v_proj.weight", "layers.{L}.qkv", WeightPart::kV},
      {"model.layers.{L}.self_attn.o_proj.weight", "layers.{L}.o"},
      {"model.layers.{L}.post_attention_layernorm.weight", "layers.{L}.ffn_norm"},
      {"model.layers.{L}.mlp.gate_proj.weight", "layers.{L}.gate_up", WeightPart::kGate},
      {"model.layers.{L}.mlp.up_proj.weight", "layers.{L}.gate_up", WeightPart::kUp},
      {"model.layers.{L}.mlp.down_proj.weight", "layers.{L}.down"},
  };
  if (qkv_bias) {
    sources.push_back({"model.layers.{L}.self_attn.q_proj.bias", "layers.{L}.qkv_bias", WeightPart::kQ});
    sources.push_back({"model.layers.{L}.self_attn.k_proj.bias", "layers.{L}.qkv_bias", WeightPart::kK});
    sources.push_back({"model.layers.{L}.self_attn.v_proj.bias", "layers.{L}.qkv_bias", WeightPart::kV});
  }
  return sources;
}

Architecture llama_architecture() { return {"LlamaForCausalLM", llama_family_sources(false), false}; }

}  // namespace tessera::model
