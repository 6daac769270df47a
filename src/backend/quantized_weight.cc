#include "backend/quantized_weight.h"

#include "backend/backend.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::backend {

void check_quantized_weight(const QuantizedWeight& w, const std::string& what) {
  const int64_t out = w.out_features, in = w.in_features, g = w.group_size;
  if (g <= 0 || g % 32 != 0 || in % g != 0 || out <= 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: a 4-bit weight of [{}, {}] in groups of {}: the input size must be a multiple of the "
                            "group size, and the group size a multiple of 32",
                            what, out, in, g));
  }
  if (w.gate_up_halves && out % 2 != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: gate | up halves need an even number of rows, found {}", what, out));
  }
  auto expect = [&](const Tensor& t, const char* part, DType dtype, Shape shape) {
    if (!t.defined() || t.dtype() != dtype || t.shape() != shape) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}.{}: expected {} {}, found {}", what, part, dtype_name(dtype), shape_to_string(shape),
                              t.defined() ? fmt::format("{} {}", dtype_name(t.dtype()), shape_to_string(t.shape()))
                                          : std::string("nothing")));
    }
  };
  expect(w.qweight, "qweight", DType::kI32, {out, in / 8});
  expect(w.scales, "scales", DType::kF16, {out, in / g});
  expect(w.zeros, "zeros", DType::kU8, {out, in / g});
}

Tensor dequantize_weight(const QuantizedWeight& host) {
  check_quantized_weight(host, "dequantize_weight");
  TESSERA_CHECK(host.qweight.device().is_cpu() && host.qweight.contiguous() && host.scales.contiguous() &&
                host.zeros.contiguous());
  const int64_t out = host.out_features, in = host.in_features, g = host.group_size, groups = in / g;
  Tensor w = Tensor::empty({out, in}, DType::kF32);
  const auto* packed = host.qweight.data<int32_t>();
  const auto* scales = static_cast<const uint16_t*>(host.scales.raw_data());
  const auto* zeros = host.zeros.data<uint8_t>();
  float* dst = w.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const uint32_t word = static_cast<uint32_t>(packed[o * (in / 8) + i / 8]);
      const int q = static_cast<int>((word >> (4 * (i % 8))) & 0xF);
      const int64_t group = o * groups + i / g;
      dst[o * in + i] = static_cast<float>(q - zeros[group]) * f16_to_f32(scales[group]);
    }
  }
  return w;
}

// The defaults of a backend without 4-bit kernels: the model never calls them
// there (it dequantizes when supports_quantized_linear() is false).
QuantizedWeight Backend::upload_quantized_weight(const QuantizedWeight&) {
  throw Error(ErrorKind::kInternal, "this backend keeps no 4-bit weights; dequantize them for it");
}

void Backend::linear_quantized(const Tensor&, const QuantizedWeight&, const Tensor&, Tensor&) {
  throw Error(ErrorKind::kInternal, "this backend has no 4-bit linear; dequantize the weights for it");
}

}  // namespace tessera::backend
