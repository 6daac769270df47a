// `tessera lite auto_awq`: writes an AWQ checkpoint (AutoAWQ's GEMM layout, as
// LMDeploy's `lite auto_awq` writes it; loader/awq.h) from a 16-bit model.
//
// Each group of weights is rounded to nearest with a per-group min/max zero
// point (RTN). Given calibration tokens, the input channels are first scaled
// by their activations, AWQ's activation-aware scaling (awq_scales.h says
// how); without, the rounding alone. The file layout is the same either way,
// so AWQ exports from LMDeploy or AutoAWQ load the same way.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "backend/backend.h"

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

// What activation-aware scaling runs on.
struct AwqCalibration {
  std::vector<std::vector<int32_t>> sequences;  // token ids; none: round-to-nearest only
  bool search_scale = false;                    // search α per input and clip (awq_scales.h), else `ratio`
  float ratio = 0.5f;
  int64_t batch_size = 1;                       // sequences a calibration forward
  backend::Backend* backend = nullptr;          // runs the 16-bit model (tp 1); null: a CPU backend
};

// The same, the linear layers' inputs scaled by their activations on
// `calibration.sequences` first (and the scales folded into the norms and
// up's rows) where there are any.
void write_awq_model(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                     int64_t group_size, const AwqCalibration& calibration);

}  // namespace tessera::model
