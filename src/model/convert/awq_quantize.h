// `tessera lite auto_awq`: writes an AWQ checkpoint (AutoAWQ's GEMM layout, as
// LMDeploy's `lite auto_awq` writes it; loader/awq.h) from a 16-bit model.
//
// The quantization is round-to-nearest with a per-group min/max zero point
// (RTN), not activation-aware: no calibration data, no search for per-channel
// scales. AWQ proper scales salient input channels before rounding and loses
// less accuracy; the file layout is the same, so AWQ exports from LMDeploy or
// AutoAWQ load the same way.
#pragma once

#include <filesystem>

#include "backend/quantized_weight.h"
#include "core/tensor.h"

namespace tessera::model {

// The 4-bit weight of `weight` (f32 [out, in]) in groups of `group_size`
// inputs: per group scale = max(max - min, 1e-5) / 15 rounded to f16,
// zero = clamp(round(-min / scale), 0, 15), q = clamp(round(w / scale) + zero, 0, 15).
backend::QuantizedWeight quantize_rtn(const Tensor& weight, int64_t group_size);

// Quantizes every linear layer of the model in `model_dir` (embeddings, LM
// head, norms and biases kept as they are) into `out_dir`: model.safetensors,
// config.json with quantization_config, and the tokenizer, template and
// generation files copied. Throws Error(kInvalidArgument) naming a layer whose
// sizes the group size does not divide.
void write_awq_model(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                     int64_t group_size);

}  // namespace tessera::model
