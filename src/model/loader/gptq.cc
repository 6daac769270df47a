#include "model/loader/gptq.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/loader/quantized_linear.h"

namespace tessera::model {

namespace {

const Tensor& expect_tensor(const Checkpoint& checkpoint, const std::string& name, DType dtype, const Shape& shape,
                            const std::string& meaning) {
  return expect_quantized_tensor(checkpoint, name, dtype, shape, meaning, "GPTQ",
                                 "GPTQ checkpoints store qweight, qzeros and g_idx as int32 and scales as float16");
}

// One GPTQ linear's tensors, checked against [out, in] and the group size.
struct GptqLinear {
  const int32_t* qweight = nullptr;  // [in / 8, out]
  const int32_t* qzeros = nullptr;   // [groups, out / 8]
  Tensor scales;                     // f16 [groups, out]
  const int32_t* g_idx = nullptr;    // [in], or null where the checkpoint has none
  int64_t out = 0, in = 0, groups = 0;
  uint32_t zero_offset = 1;          // checkpoint_format gptq stores zero - 1

  // q of input i, output o.
  uint32_t q(int64_t i, int64_t o) const {
    return (static_cast<uint32_t>(qweight[(i / 8) * out + o]) >> (4 * (i % 8))) & 0xF;
  }
  // The zero point of group g, output o.
  uint32_t zero(int64_t g, int64_t o) const {
    const uint32_t stored = (static_cast<uint32_t>(qzeros[g * (out / 8) + o / 8]) >> (4 * (o % 8))) & 0xF;
    return (stored + zero_offset) & 0xF;
  }
};

GptqLinear read_tensors(const Checkpoint& checkpoint, const std::string& base, int64_t out, int64_t in,
                        const QuantizationConfig& config) {
  const int64_t group_size = config.group_size;
  const std::string what = fmt::format("a linear of {} inputs and {} outputs in groups of {}", in, out, group_size);
  if (out % 8 != 0 || in % group_size != 0 || group_size % 8 != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} cannot be stored as GPTQ: the outputs must be a multiple of 8 and the inputs of "
                            "the group size",
                            base, what));
  }
  GptqLinear w;
  w.out = out;
  w.in = in;
  w.groups = in / group_size;
  w.zero_offset = config.checkpoint_format == "gptq_v2" ? 0 : 1;
  w.qweight = expect_tensor(checkpoint, base + ".qweight", DType::kI32, {in / 8, out}, what).data<int32_t>();
  w.qzeros = expect_tensor(checkpoint, base + ".qzeros", DType::kI32, {w.groups, out / 8}, what).data<int32_t>();
  const Tensor& scales = expect_tensor(checkpoint, base + ".scales", DType::kF16, {w.groups, out}, what);
  w.scales = scales.dtype() == DType::kF16 ? scales : scales.to_dtype(DType::kF16);
  const std::string g_idx = base + ".g_idx";
  if (checkpoint.contains(g_idx)) {
    w.g_idx = expect_tensor(checkpoint, g_idx, DType::kI32, {in}, what).data<int32_t>();
    for (int64_t i = 0; i < in; ++i) {
      if (w.g_idx[i] >= 0 && w.g_idx[i] < w.groups) continue;
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: '{}' puts input {} in group {}, but there are {} groups", checkpoint.get(g_idx).file,
                              g_idx, i, w.g_idx[i], w.groups),
                  "the checkpoint is damaged or does not match config.json's group_size");
    }
  } else if (config.desc_act) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: quantization_config.desc_act is true but '{}' is missing", checkpoint.dir().string(),
                            g_idx),
                "an act-order GPTQ export stores each linear's g_idx; is the checkpoint complete?");
  }
  return w;
}

}  // namespace

backend::QuantizedWeight read_gptq_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out,
                                          int64_t in, const QuantizationConfig& config) {
  const GptqLinear source = read_tensors(checkpoint, base, out, in, config);
  const int64_t groups = source.groups, group_size = config.group_size;
  if (source.g_idx != nullptr) {  // the groups must be contiguous, as the canonical layout's are
    for (int64_t i = 0; i < in; ++i) {
      if (source.g_idx[i] == i / group_size) continue;
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: '{}.g_idx' puts input {} in group {}, not {}, but quantization_config.desc_act is "
                              "false",
                              checkpoint.dir().string(), base, i, source.g_idx[i], i / group_size),
                  "an act-order export declares desc_act true (its linears are then dequantized at load)");
    }
  }
  backend::QuantizedWeight w;
  w.out_features = out;
  w.in_features = in;
  w.group_size = group_size;
  // qweight: GPTQ's word (r, o) holds inputs 8r .. 8r + 7 of output o in
  // natural order, which is the canonical word (o, r): a transpose.
  w.qweight = Tensor::empty({out, in / 8}, DType::kI32);
  int32_t* packed = w.qweight.data<int32_t>();
  for (int64_t r = 0; r < in / 8; ++r) {
    for (int64_t o = 0; o < out; ++o) packed[o * (in / 8) + r] = source.qweight[r * out + o];
  }
  w.zeros = Tensor::empty({out, groups}, DType::kU8);
  uint8_t* zeros = w.zeros.data<uint8_t>();
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < groups; ++g) zeros[o * groups + g] = static_cast<uint8_t>(source.zero(g, o));
  }
  w.scales = scales_by_output(source.scales);
  backend::check_quantized_weight(w, base);
  return w;
}

Tensor dequantize_gptq_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out, int64_t in,
                              const QuantizationConfig& config) {
  const GptqLinear source = read_tensors(checkpoint, base, out, in, config);
  const Tensor scales = source.scales.to_f32();  // [groups, out]
  const float* s = scales.data<float>();
  Tensor dense = Tensor::empty({out, in}, DType::kF32);
  float* w = dense.data<float>();
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = source.g_idx != nullptr ? source.g_idx[i] : i / config.group_size;
    for (int64_t o = 0; o < out; ++o) {
      const int32_t q = static_cast<int32_t>(source.q(i, o)), zero = static_cast<int32_t>(source.zero(g, o));
      w[o * in + i] = static_cast<float>(q - zero) * s[g * out + o];
    }
  }
  return dense;
}

}  // namespace tessera::model
