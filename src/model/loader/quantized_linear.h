// 4-bit linear layers of a checkpoint, whichever format config.json's
// quantization_config names: AWQ (loader/awq.h) or GPTQ (loader/gptq.h).
// Both are read into tessera's canonical QuantizedWeight
// (backend/quantized_weight.h), so everything past the loader serves both.
#pragma once

#include <string>

#include "backend/quantized_weight.h"
#include "model/loader/checkpoint.h"
#include "model/model_spec.h"

namespace tessera::model {

// True when the checkpoint holds `<base>.qweight` (base: a 16-bit weight's
// name without ".weight"); both formats name their packed weights so.
bool has_quantized_linear(const Checkpoint& checkpoint, const std::string& base);

// Reads `<base>.*` of a linear [out, in] in the format `config` names.
// Throws Error(kInvalidArgument) naming the tensor, the expected and the found
// shape or dtype.
backend::QuantizedWeight read_quantized_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out,
                                               int64_t in, const QuantizationConfig& config);

// The checkpoint's tensor `name`, checked to have `shape` and `dtype` (kF16:
// any float type, converted by the caller), else Error(kInvalidArgument)
// naming the format ("AWQ", "GPTQ"), the tensor, both shapes or dtypes, what
// the tensor is (`meaning`) and `dtype_hint` for a wrong dtype.
const Tensor& expect_quantized_tensor(const Checkpoint& checkpoint, const std::string& name, DType dtype,
                                      const Shape& shape, const std::string& meaning, const std::string& format,
                                      const std::string& dtype_hint);

// Both formats store scales [groups, out]; the canonical layout wants
// [out, groups]. Returns that transpose as f16 (converting another float type).
Tensor scales_by_output(const Tensor& scales);

// LMDeploy's --model-format against what config.json declares: "" detects
// (any), "hf"/"llama" need 16-bit weights, "awq", "gptq" and "fp8" need a
// quantization_config of that quant_method. Throws Error(kInvalidArgument)
// saying which to pass.
void check_model_format(const ModelSpec& spec, const std::string& format, const std::string& model_dir);

}  // namespace tessera::model
