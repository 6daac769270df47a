#include "model/loader/fp8.h"

#include <fmt/format.h>

#include <array>

#include "core/error.h"

namespace tessera::model {

Tensor dequantize_fp8_linear(const Checkpoint& checkpoint, const std::string& weight_name,
                             const QuantizationConfig& config) {
  const CheckpointTensor& source = checkpoint.get(weight_name);
  const Tensor& weight = source.tensor;
  if (!config.fp8()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: tensor '{}' is FP8 (F8_E4M3), but config.json declares no FP8 quantization_config",
                            source.file, weight_name),
                "an FP8 export's config.json has quantization_config {\"quant_method\": \"fp8\", "
                "\"weight_block_size\": [128, 128]}; is the config the checkpoint's own?");
  }
  if (weight.rank() != 2) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: FP8 tensor '{}' has shape {}, expected a matrix [out, in]", source.file,
                            weight_name, shape_to_string(weight.shape())),
                "only linear layers' weights are stored as FP8");
  }
  const int64_t out = weight.dim(0), in = weight.dim(1);
  const int64_t block_rows = config.block_rows, block_cols = config.block_cols;
  const std::string scale_name = weight_name + "_scale_inv";
  if (!checkpoint.contains(scale_name)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: FP8 tensor '{}' has no scale '{}'", source.file, weight_name, scale_name),
                "tessera reads fine-grained FP8 exports (a weight_scale_inv per block of weight_block_size); "
                "is the checkpoint complete?");
  }
  const CheckpointTensor& scale_source = checkpoint.get(scale_name);
  const Shape scale_shape = {(out + block_rows - 1) / block_rows, (in + block_cols - 1) / block_cols};
  if (scale_source.tensor.shape() != scale_shape) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: FP8 scale '{}' has shape {}, expected {} (one a block of {} x {} of the weight {})",
                            scale_source.file, scale_name, shape_to_string(scale_source.tensor.shape()),
                            shape_to_string(scale_shape), block_rows, block_cols, shape_to_string(weight.shape())),
                "the checkpoint does not match quantization_config.weight_block_size; is the config its own?");
  }
  if (!dtype_is_float(scale_source.tensor.dtype())) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: FP8 scale '{}' has dtype {}, expected a float type", scale_source.file, scale_name,
                            dtype_name(scale_source.tensor.dtype())),
                "the scales of an FP8 export are f32 (or bf16)");
  }
  const Tensor scales = scale_source.tensor.to_f32();
  const float* s = scales.data<float>();
  // Every E4M3 code's value, once: the loop below is a lookup and a multiply.
  std::array<float, 256> value{};
  for (int code = 0; code < 256; ++code) value[code] = f8e4m3_to_f32(static_cast<uint8_t>(code));
  Tensor dense = Tensor::empty({out, in}, DType::kF32);
  const auto* q = static_cast<const uint8_t*>(weight.raw_data());
  float* w = dense.data<float>();
  const int64_t scale_cols = scale_shape[1];
  for (int64_t o = 0; o < out; ++o) {
    const float* scale_row = s + (o / block_rows) * scale_cols;
    for (int64_t i = 0; i < in; ++i) w[o * in + i] = value[q[o * in + i]] * scale_row[i / block_cols];
  }
  return dense;
}

}  // namespace tessera::model
