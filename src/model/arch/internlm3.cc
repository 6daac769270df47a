// InternLM3ForCausalLM (internlm3-8b-instruct): Llama's names and layers, with
// config flags bias and qkv_bias false (the released models'; true is
// refused when config.json is read).
#include "model/arch/architecture.h"

namespace tessera::model {

Architecture internlm3_architecture() { return {"InternLM3ForCausalLM", llama_family_sources(false), false}; }

}  // namespace tessera::model
