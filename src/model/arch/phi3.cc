// Phi3ForCausalLM (Phi-3-mini/medium with their 4k context, Phi-4): Llama's
// layers with q | k | v fused into self_attn.qkv_proj and gate | up into
// mlp.gate_up_proj, in the canonical rows' order, so each fills its
// canonical weight whole. Phi-3's sliding window is config.json's
// sliding_window; a partial rotary factor or LongRoPE scaling is refused
// when config.json is read.
#include "model/arch/architecture.h"

namespace tessera::model {

Architecture phi3_architecture() {
  return {"Phi3ForCausalLM",
          {
              {"model.embed_tokens.weight", "embed"},
              {"model.norm.weight", "final_norm"},
              {"lm_head.weight", "lm_head", WeightPart::kWhole, /*optional=*/true},
              {"model.layers.{L}.input_layernorm.weight", "layers.{L}.attn_norm"},
              {"model.layers.{L}.self_attn.qkv_proj.weight", "layers.{L}.qkv"},
              {"model.layers.{L}.self_attn.o_proj.weight", "layers.{L}.o"},
              {"model.layers.{L}.post_attention_layernorm.weight", "layers.{L}.ffn_norm"},
              {"model.layers.{L}.mlp.gate_up_proj.weight", "layers.{L}.gate_up"},
              {"model.layers.{L}.mlp.down_proj.weight", "layers.{L}.down"},
          },
          false};
}

}  // namespace tessera::model
