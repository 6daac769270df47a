// Writes tensors as one .safetensors file (what converters and the demo model
// produce, and what tests build hostile variants from).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tessera::model {

// Writes `tensors` (contiguous host tensors, any dtype but i4) in the given order.
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace tessera::model
