// Element types and the conversions between them.
//
// f16/bf16 are stored as raw 16-bit patterns; conversion is done here in plain
// C++ so the core layer needs no CUDA headers. kI4 is packed int4 (two values
// a byte, low nibble first), the storage of 4-bit weights; kU4 packs unsigned
// 4-bit codes (0..15) the same way, a 4-bit KV cache's (backend/paged_kv.h).
// kF8E4M3 is OCP FP8 E4M3 (e4m3fn: no infinities, S.1111.111 is NaN), the
// storage of FP8 checkpoints' weights; it is read only with its block scales
// (model/loader/fp8.h), so convert_to_f32 refuses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kI4, kU4, kF8E4M3 };

// Bits per element (4 for kI4 and kU4), so byte sizes of packed types are exact.
int dtype_bits(DType dtype);
// Bytes for `count` elements, rounding packed types up to whole bytes.
size_t dtype_bytes(DType dtype, size_t count);
// Lower-case short name: "f32", "bf16", ...
const char* dtype_name(DType dtype);
// Parses safetensors' names ("F32", "BF16", ...). Returns false when unknown.
bool dtype_from_safetensors(std::string_view name, DType* out);
bool dtype_is_float(DType dtype);

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);        // round to nearest even
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);       // round to nearest even, NaN kept
float f8e4m3_to_f32(uint8_t bits);       // exact (every E4M3 value is an f32)

// Converts `count` elements of a float type (f32, f16, bf16, f64) to f32.
void convert_to_f32(DType src_dtype, const void* src, float* dst, size_t count);
// Converts `count` f32 values to a float type (f32, f16, bf16).
void convert_from_f32(const float* src, DType dst_dtype, void* dst, size_t count);

}  // namespace tessera
