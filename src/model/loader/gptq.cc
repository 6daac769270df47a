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

// g_idx must put input i in group i / group_size: contiguous groups, as the
// canonical layout has them. An act-order export's permuted groups are refused.
void check_group_index(const Checkpoint& checkpoint, const std::string& base, int64_t in, int64_t group_size,
                       const QuantizationConfig& config, const std::string& meaning) {
  const std::string name = base + ".g_idx";
  if (!checkpoint.contains(name)) {
    if (!config.desc_act) return;
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: quantization_config.desc_act is true but '{}' is missing", checkpoint.dir().string(),
                            name),
                "an act-order GPTQ export stores each linear's g_idx; is the checkpoint complete?");
  }
  const Tensor& g_idx = expect_tensor(checkpoint, name, DType::kI32, {in}, meaning);
  const int32_t* group = g_idx.data<int32_t>();
  for (int64_t i = 0; i < in; ++i) {
    if (group[i] == i / group_size) continue;
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: '{}' puts input {} in group {}, not {}: act-order (desc_act) GPTQ with permuted "
                            "groups is not supported",
                            checkpoint.get(name).file, name, i, group[i], i / group_size),
                "quantize with desc_act false (as the published *-GPTQ-Int4 models are), or use an AWQ export");
  }
}

}  // namespace

backend::QuantizedWeight read_gptq_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out,
                                          int64_t in, const QuantizationConfig& config) {
  const int64_t group_size = config.group_size;
  const std::string what = fmt::format("a linear of {} inputs and {} outputs in groups of {}", in, out, group_size);
  if (out % 8 != 0 || in % group_size != 0 || group_size % 8 != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} cannot be stored as GPTQ: the outputs must be a multiple of 8 and the inputs of "
                            "the group size",
                            base, what));
  }
  const int64_t groups = in / group_size;
  const Tensor& qweight = expect_tensor(checkpoint, base + ".qweight", DType::kI32, {in / 8, out}, what);
  const Tensor& qzeros = expect_tensor(checkpoint, base + ".qzeros", DType::kI32, {groups, out / 8}, what);
  const Tensor& scales = expect_tensor(checkpoint, base + ".scales", DType::kF16, {groups, out}, what);
  check_group_index(checkpoint, base, in, group_size, config, what);

  backend::QuantizedWeight w;
  w.out_features = out;
  w.in_features = in;
  w.group_size = group_size;
  // qweight: GPTQ's word (r, o) holds inputs 8r .. 8r + 7 of output o in
  // natural order, which is the canonical word (o, r): a transpose.
  w.qweight = Tensor::empty({out, in / 8}, DType::kI32);
  const int32_t* source = qweight.data<int32_t>();
  int32_t* packed = w.qweight.data<int32_t>();
  for (int64_t r = 0; r < in / 8; ++r) {
    for (int64_t o = 0; o < out; ++o) packed[o * (in / 8) + r] = source[r * out + o];
  }
  // zeros: nibble j of column c is output 8c + j; "gptq" stores zero - 1.
  const uint32_t offset = config.checkpoint_format == "gptq_v2" ? 0 : 1;
  w.zeros = Tensor::empty({out, groups}, DType::kU8);
  const int32_t* zero_words = qzeros.data<int32_t>();
  uint8_t* zeros = w.zeros.data<uint8_t>();
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < out / 8; ++c) {
      const uint32_t word = static_cast<uint32_t>(zero_words[g * (out / 8) + c]);
      for (int j = 0; j < 8; ++j) zeros[(8 * c + j) * groups + g] = (((word >> (4 * j)) & 0xF) + offset) & 0xF;
    }
  }
  w.scales = scales_by_output(scales);
  backend::check_quantized_weight(w, base);
  return w;
}

}  // namespace tessera::model
