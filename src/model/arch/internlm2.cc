// InternLM2ForCausalLM (InternLM2 / 2.5): its own names, q/k/v packed into one
// `wqkv` grouped by KV head (unpacked by WeightPart::kPackedWqkv), RoPE as HF's
// rotate_half, no biases.
#include "model/arch/architecture.h"

namespace tessera::model {

Architecture internlm2_architecture() {
  return {"InternLM2ForCausalLM",
          {
              {"model.tok_embeddings.weight", "embed"},
              {"model.norm.weight", "final_norm"},
              {"output.weight", "lm_head", WeightPart::kWhole, /*optional=*/true},
              {"model.layers.{L}.attention_norm.weight", "layers.{L}.attn_norm"},
              {"model.layers.{L}.attention.wqkv.weight", "layers.{L}.qkv", WeightPart::kPackedWqkv},
              {"model.layers.{L}.attention.wo.weight", "layers.{L}.o"},
              {"model.layers.{L}.ffn_norm.weight", "layers.{L}.ffn_norm"},
              {"model.layers.{L}.feed_forward.w1.weight", "layers.{L}.gate_up", WeightPart::kGate},
              {"model.layers.{L}.feed_forward.w3.weight", "layers.{L}.gate_up", WeightPart::kUp},
              {"model.layers.{L}.feed_forward.w2.weight", "layers.{L}.down"},
          },
          false};
}

}  // namespace tessera::model
