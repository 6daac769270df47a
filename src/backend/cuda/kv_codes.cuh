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

// Code i (0..7) of eight 8-bit codes.
__device__ __forceinline__ float code_at(uint2 v, int i) {
  const uint32_t word = i < 4 ? v.x : v.y;
  return __uint_as_float(__byte_perm(word, kTwo23Bits, 0x7440u | (i % 4))) - 8388608.0f;
}

// Code i (0..7) of eight 4-bit codes.
__device__ __forceinline__ float code_at(uint32_t v, int i) {
  return __uint_as_float(kTwo23Bits | ((v >> (4 * i)) & 0xFu)) - 8388608.0f;
}

}  // namespace tessera::backend::cuda
