// The codes of a quantized KV cache (backend/paged_kv.h) as the attention
// kernels read them: 8-bit codes are bytes (C = uint8_t), 4-bit ones two a
// byte, element 2i in the low nibble (C = Nibbles, whose pointers point at
// those bytes). A code becomes a float exactly as the low bits of 2^23's
// mantissa, less 2^23: a byte permute (or a shift and mask) and an add, where
// a conversion instruction runs at a quarter of their rate.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels.h"

namespace tessera::backend::cuda {

// C for a cache of 4-bit codes.
struct Nibbles {
  uint8_t byte;
};

// Bits an element of a cache of C takes.
template <typename C>
inline constexpr int kElementBits = std::is_same_v<C, Nibbles> ? 4 : 8 * static_cast<int>(sizeof(C));

// Element `at` of a cache of C (a multiple of 8 elements for codes).
template <typename C>
__device__ __forceinline__ const void* element_address(const C* cache, int64_t at) {
  return reinterpret_cast<const char*>(cache) + at * kElementBits<C> / 8;
}

// fn(k_codes, v_codes) with the pointers typed by the cache's width: uint8_t*
// for 8-bit codes, Nibbles* for 4-bit ones (the kernels' C).
template <typename Fn>
void with_typed_codes(const QuantizedKvLayer& cache, Fn&& fn) {
  if (cache.bits == 4) {
    return fn(reinterpret_cast<Nibbles*>(cache.k_codes), reinterpret_cast<Nibbles*>(cache.v_codes));
  }
  fn(cache.k_codes, cache.v_codes);
}

constexpr uint32_t kTwo23Bits = 0x4B000000u;  // 2^23 as a float's bits

// Byte i (0..3) of `word` as a float.
__device__ __forceinline__ float byte_value(uint32_t word, int i) {
  return __uint_as_float(__byte_perm(word, kTwo23Bits, 0x7440u | i)) - 8388608.0f;
}

// Code i (0..7) of eight 8-bit codes.
__device__ __forceinline__ float code_at(uint2 v, int i) { return byte_value(i < 4 ? v.x : v.y, i % 4); }

// Code i (0..7) of eight 4-bit codes.
__device__ __forceinline__ float code_at(uint32_t v, int i) {
  return __uint_as_float(kTwo23Bits | ((v >> (4 * i)) & 0xFu)) - 8388608.0f;
}

// All eight codes of a load as floats, in order.
__device__ __forceinline__ void code_values(uint2 v, float (&c)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) c[i] = code_at(v, i);
}
// 4-bit codes: the even elements' nibbles and the odd ones' become bytes
// (two masks and a shift for all eight), then each takes 8 bits' byte
// permute, where code_at takes a shift and a mask each.
__device__ __forceinline__ void code_values(uint32_t v, float (&c)[8]) {
  const uint32_t even = v & 0x0F0F0F0Fu, odd = (v >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    c[2 * i] = byte_value(even, i);
    c[2 * i + 1] = byte_value(odd, i);
  }
}

}  // namespace tessera::backend::cuda
