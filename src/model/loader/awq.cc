#include "model/loader/awq.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "model/loader/quantized_linear.h"

namespace tessera::model {

namespace {

const Tensor& expect_tensor(const Checkpoint& checkpoint, const std::string& name, DType dtype, const Shape& shape,
                            const std::string& meaning) {
  return expect_quantized_tensor(checkpoint, name, dtype, shape, meaning, "AWQ",
                                 "AWQ GEMM checkpoints store qweight and qzeros as int32 and scales as float16");
}

}  // namespace

void unpack_awq_matrix(const int32_t* awq, int64_t rows, int64_t out, uint8_t* values) {
  const int64_t columns = out / 8;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) {
      const uint32_t word = static_cast<uint32_t>(awq[r * columns + c]);
      for (int j = 0; j < 8; ++j) values[(8 * c + kAwqOrder[j]) * rows + r] = (word >> (4 * j)) & 0xF;
    }
  }
}

void pack_awq_matrix(const uint8_t* values, int64_t rows, int64_t out, int32_t* awq) {
  const int64_t columns = out / 8;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j) word |= static_cast<uint32_t>(values[(8 * c + kAwqOrder[j]) * rows + r] & 0xF) << (4 * j);
      awq[r * columns + c] = static_cast<int32_t>(word);
    }
  }
}

backend::QuantizedWeight read_awq_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out,
                                         int64_t in, int64_t group_size) {
  const std::string what = fmt::format("a linear of {} inputs and {} outputs in groups of {}", in, out, group_size);
  if (out % 8 != 0 || in % group_size != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} cannot be stored as AWQ: the outputs must be a multiple of 8 and the inputs of "
                            "the group size",
                            base, what));
  }
  const int64_t groups = in / group_size;
  const Tensor& qweight = expect_tensor(checkpoint, base + ".qweight", DType::kI32, {in, out / 8}, what);
  const Tensor& qzeros = expect_tensor(checkpoint, base + ".qzeros", DType::kI32, {groups, out / 8}, what);
  const Tensor& scales = expect_tensor(checkpoint, base + ".scales", DType::kF16, {groups, out}, what);

  backend::QuantizedWeight w;
  w.out_features = out;
  w.in_features = in;
  w.group_size = group_size;
  // qweight: unpack to one value a byte [out, in], then pack along the input.
  std::vector<uint8_t> values(static_cast<size_t>(out * in));
  unpack_awq_matrix(qweight.data<int32_t>(), in, out, values.data());
  w.qweight = Tensor::empty({out, in / 8}, DType::kI32);
  auto* packed = w.qweight.data<int32_t>();
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t word = 0; word < in / 8; ++word) {
      uint32_t bits = 0;
      for (int i = 0; i < 8; ++i) bits |= static_cast<uint32_t>(values[o * in + 8 * word + i]) << (4 * i);
      packed[o * (in / 8) + word] = static_cast<int32_t>(bits);
    }
  }
  w.zeros = Tensor::empty({out, groups}, DType::kU8);
  unpack_awq_matrix(qzeros.data<int32_t>(), groups, out, w.zeros.data<uint8_t>());
  w.scales = scales_by_output(scales);
  backend::check_quantized_weight(w, base);
  return w;
}

AwqTensors to_awq_tensors(const backend::QuantizedWeight& w) {
  backend::check_quantized_weight(w, "to_awq_tensors");
  const int64_t out = w.out_features, in = w.in_features, groups = in / w.group_size;
  std::vector<uint8_t> values(static_cast<size_t>(out * in));
  const auto* packed = w.qweight.data<int32_t>();
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      values[o * in + i] = (static_cast<uint32_t>(packed[o * (in / 8) + i / 8]) >> (4 * (i % 8))) & 0xF;
    }
  }
  AwqTensors t;
  t.qweight = Tensor::empty({in, out / 8}, DType::kI32);
  pack_awq_matrix(values.data(), in, out, t.qweight.data<int32_t>());
  t.qzeros = Tensor::empty({groups, out / 8}, DType::kI32);
  pack_awq_matrix(w.zeros.data<uint8_t>(), groups, out, t.qzeros.data<int32_t>());
  t.scales = Tensor::empty({groups, out}, DType::kF16);
  const auto* s = static_cast<const uint16_t*>(w.scales.raw_data());
  auto* d = static_cast<uint16_t*>(t.scales.raw_data());
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < groups; ++g) d[g * out + o] = s[o * groups + g];
  }
  return t;
}

}  // namespace tessera::model
