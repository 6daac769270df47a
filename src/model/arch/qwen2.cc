// Qwen2ForCausalLM: Llama's names plus biases on q, k and v (not on o).
#include "model/arch/architecture.h"

namespace tessera::model {

Architecture qwen2_architecture() { return {"Qwen2ForCausalLM", llama_family_sources(true), true}; }

}  // namespace tessera::model
