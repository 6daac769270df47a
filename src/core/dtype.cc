#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace tessera {

int dtype_bits(DType dtype) {
  switch (dtype) {
    case DType::kF64: case DType::kI64: return 64;
    case DType::kF32: case DType::kI32: return 32;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 16;
    case DType::kI8: case DType::kU8: case DType::kBool: case DType::kF8E4M3: return 8;
    case DType::kI4: case DType::kU4: return 4;
  }
  return 0;
}

size_t dtype_bytes(DType dtype, size_t count) { return (count * dtype_bits(dtype) + 7) / 8; }

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kI16: return "i16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
    case DType::kI4: return "i4";
    case DType::kU4: return "u4";
    case DType::kF8E4M3: return "f8_e4m3";
  }
  return "?";
}

bool dtype_from_safetensors(std::string_view name, DType* out) {
  struct Entry { std::string_view name; DType dtype; };
  static constexpr Entry kTable[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"F64", DType::kF64},
      {"I64", DType::kI64}, {"I32", DType::kI32}, {"I16", DType::kI16},   {"I8", DType::kI8},
      {"U8", DType::kU8},   {"BOOL", DType::kBool}, {"F8_E4M3", DType::kF8E4M3},
  };
  for (const Entry& entry : kTable) {
    if (entry.name == name) {
      *out = entry.dtype;
      return true;
    }
  }
  return false;
}

bool dtype_is_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF64;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int shift = 0;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ff;
      bits = sign | static_cast<uint32_t>(127 - 15 - shift + 1) << 23 | mantissa << 13;
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // inf or nan
    return sign | 0x7c00 | (abs_bits > 0x7f800000u ? 0x200 : 0);
  }
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00;  // rounds past the largest half
  if (abs_bits < 0x38800000u) {                        // subnormal half or zero
    float magnitude = std::bit_cast<float>(abs_bits);
    // 2^24 scales the smallest subnormal to 1; nearbyint rounds half to even.
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f));
  }
  uint32_t mantissa_odd = (abs_bits >> 13) & 1u;
  abs_bits += 0xfffu + mantissa_odd;  // round to nearest even on the dropped 13 bits
  return sign | static_cast<uint16_t>((abs_bits - (112u << 23)) >> 13);
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// E4M3: bias 7, three mantissa bits; exponent 0 is subnormal (m / 8 · 2^-6),
// and S.1111.111 the only NaN (the format gives up infinities for range: 448).
float f8e4m3_to_f32(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
}

uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

void convert_to_f32(DType src_dtype, const void* src, float* dst, size_t count) {
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(p[i]);
      return;
    }
    case DType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(p[i]);
      return;
    }
    case DType::kF64: {
      const auto* p = static_cast<const double*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(p[i]);
      return;
    }
    default:
      throw Error(ErrorKind::kUnsupported, std::string("cannot convert ") + dtype_name(src_dtype) + " to f32");
  }
}

void convert_from_f32(const float* src, DType dst_dtype, void* dst, size_t count) {
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF16: {
      auto* p = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) p[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* p = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) p[i] = f32_to_bf16(src[i]);
      return;
    }
    default:
      throw Error(ErrorKind::kUnsupported, std::string("cannot convert f32 to ") + dtype_name(dst_dtype));
  }
}

}  // namespace tessera
