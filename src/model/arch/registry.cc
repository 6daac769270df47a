// The table of supported architectures, and the tensor-parallel split of each
// canonical weight.
#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/architecture.h"

namespace tessera::model {

namespace {
const std::vector<Architecture>& registry() {
  static const std::vector<Architecture> architectures = {
      llama_architecture(), mistral_architecture(), qwen2_architecture(), internlm2_architecture(),
      internlm3_architecture(), qwen3_architecture(), phi3_architecture()};
  return architectures;
}
}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const Architecture& arch : registry()) names.push_back(arch.name);
  return names;
}

void apply_architecture(ModelSpec& spec, const Architecture& arch) {
  spec.qkv_bias = arch.qkv_bias;
  spec.head_norms = arch.head_norms;
}

const Architecture& find_architecture(const std::string& name) {
  for (const Architecture& arch : registry()) {
    if (arch.name == name) return arch;
  }
  throw Error(ErrorKind::kUnsupported, fmt::format("architecture '{}' is not supported", name),
              fmt::format("supported architectures: {}", fmt::join(supported_architectures(), ", ")));
}

TpSplit tp_split_of(const std::string& canonical_name) {
  auto ends_with = [&](const char* suffix) { return canonical_name.ends_with(suffix); };
  if (canonical_name == "embed" || canonical_name == "lm_head") return TpSplit::kVocab;
  if (ends_with(".qkv") || ends_with(".qkv_bias")) return TpSplit::kColumnQkv;
  if (ends_with(".gate_up")) return TpSplit::kColumnGateUp;
  if (ends_with(".o") || ends_with(".down")) return TpSplit::kRow;
  return TpSplit::kReplicated;
}

}  // namespace tessera::model
