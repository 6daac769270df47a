// MistralForCausalLM: Llama's names and layers; its sliding window comes from
// config.json (ModelSpec::sliding_window) and is applied by attention.
#include "model/arch/architecture.h"

namespace tessera::model {

Architecture mistral_architecture() { return {"MistralForCausalLM", llama_family_sources(false), false}; }

}  // namespace tessera::model
