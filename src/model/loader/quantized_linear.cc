#include "model/loader/quantized_linear.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/loader/awq.h"
#include "model/loader/gptq.h"

namespace tessera::model {

bool has_quantized_linear(const Checkpoint& checkpoint, const std::string& base) {
  return checkpoint.contains(base + ".qweight");
}

backend::QuantizedWeight read_quantized_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out,
                                               int64_t in, const QuantizationConfig& config) {
  if (config.gptq()) return read_gptq_linear(checkpoint, base, out, in, config);
  return read_awq_linear(checkpoint, base, out, in, config.group_size);
}

const Tensor& expect_quantized_tensor(const Checkpoint& checkpoint, const std::string& name, DType dtype,
                                      const Shape& shape, const std::string& meaning, const std::string& format,
                                      const std::string& dtype_hint) {
  const CheckpointTensor& source = checkpoint.get(name);
  if (source.tensor.shape() != shape) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} tensor '{}' has shape {}, expected {} ({})", source.file, format, name,
                            shape_to_string(source.tensor.shape()), shape_to_string(shape), meaning),
                fmt::format("the checkpoint does not match config.json (hidden size, heads, intermediate size or "
                            "quantization_config.group_size); is it a {} export of this model?",
                            format));
  }
  const bool ok = dtype == DType::kF16 ? dtype_is_float(source.tensor.dtype()) : source.tensor.dtype() == dtype;
  if (!ok) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} tensor '{}' has dtype {}, expected {}", source.file, format, name,
                            dtype_name(source.tensor.dtype()), dtype_name(dtype)),
                dtype_hint);
  }
  return source.tensor;
}

Tensor scales_by_output(const Tensor& scales) {
  const int64_t groups = scales.dim(0), out = scales.dim(1);
  Tensor scales_f16 = scales.dtype() == DType::kF16 ? scales : scales.to_dtype(DType::kF16);
  Tensor by_output = Tensor::empty({out, groups}, DType::kF16);
  const auto* s = static_cast<const uint16_t*>(scales_f16.raw_data());
  auto* d = static_cast<uint16_t*>(by_output.raw_data());
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) d[o * groups + g] = s[g * out + o];
  }
  return by_output;
}

void check_model_format(const ModelSpec& spec, const std::string& format, const std::string& model_dir) {
  if (format.empty()) return;
  const std::string declared = spec.quantization.method;  // "", "awq", "gptq" or "fp8"
  const bool sixteen_bit = format == "hf" || format == "llama";
  if (sixteen_bit ? declared.empty() : declared == format) return;
  auto kind = [](const std::string& method) {
    return method == "awq" ? "AWQ" : method == "gptq" ? "GPTQ" : "FP8";
  };
  if (declared.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--model-format {}, but {}/config.json declares no {} quantization_config", format,
                            model_dir, kind(format)),
                "drop --model-format (the format is read from config.json), or quantize the model first: tessera "
                "lite auto_awq MODEL OUT");
  }
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("--model-format {}, but {}/config.json declares {} weights", format, model_dir,
                          declared == "fp8" ? "FP8" : kind(declared) + std::string(" 4-bit")),
              fmt::format("pass --model-format {}, or drop --model-format (the format is read from config.json)",
                          declared));
}

}  // namespace tessera::model
