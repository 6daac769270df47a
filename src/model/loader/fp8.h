// FP8 checkpoints (Hugging Face's fine-grained FP8, as the published *-FP8
// models store them: quantization_config {quant_method fp8, fmt e4m3,
// weight_block_size [R, C]}): every FP8 linear `<name>` of [out, in] is
//   <name>.weight            F8_E4M3 [out, in]
//   <name>.weight_scale_inv  f32 (or another float) [ceil(out / R), ceil(in / C)]
// and w[o][i] = e4m3(weight[o][i]) * scale_inv[o / R][i / C] (the name is the
// exporters': the factor that undoes the quantization's division). Layers an
// export leaves unquantized (its modules_to_not_convert, the LM head) are
// 16-bit tensors without a scale and load as such. No kernel multiplies FP8
// weights yet, so each FP8 linear is dequantized to f32 here and then treated
// as a 16-bit weight (QuantizationConfig::fp8).
#pragma once

#include <string>

#include "core/tensor.h"
#include "model/loader/checkpoint.h"
#include "model/model_spec.h"

namespace tessera::model {

// The f32 weight [out, in] of the FP8 linear `weight_name` (`<name>.weight`),
// its shape the checkpoint's. Throws Error(kInvalidArgument) naming the
// tensor where the scale is missing or its shape or dtype disagrees with the
// weight's and config.block_rows / block_cols, or where the model declares
// no FP8 quantization_config.
Tensor dequantize_fp8_linear(const Checkpoint& checkpoint, const std::string& weight_name,
                             const QuantizationConfig& config);

}  // namespace tessera::model
