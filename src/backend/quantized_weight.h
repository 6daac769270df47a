// QuantizedWeight: a linear layer's weight in 4-bit groups with a zero point
// and a scale per group (AWQ, W4A16). The activations stay 16-bit (or f32);
// only the weight is 4-bit.
//
// The canonical layout, on the host and on a device whose backend keeps no
// layout of its own (the CUDA backend's tensor-core tiles, backend_layout
// below, are made from it at upload), for a weight of [out, in] (out = output channels, in = input features, g =
// group_size; in % g == 0, g % 32 == 0):
//   qweight  i32 [out, in / 8]   word w of row o holds inputs 8w .. 8w + 7,
//                                 input 8w + i in bits 4i .. 4i + 3 (natural order)
//   scales   f16 [out, in / g]
//   zeros    u8  [out, in / g]   0 .. 15
//   w[o][i] = (q[o][i] - zeros[o][i / g]) * scales[o][i / g]
// Rows are output channels, as in a 16-bit weight [out, in], so a row split
// (column-parallel layers, q | k | v) is a row split of all three, and a column
// split (row-parallel layers) takes whole groups. AWQ checkpoints store the
// transpose with interleaved nibbles; the loader repacks them into this.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace tessera::backend {

struct QuantizedWeight {
  Tensor qweight;  // i32 [out, in / 8]
  Tensor scales;   // f16 [out, in / group_size]
  Tensor zeros;    // u8  [out, in / group_size]
  int64_t out_features = 0;
  int64_t in_features = 0;
  int64_t group_size = 0;
  // The rows are two halves, gate | up, each out / 2 rows (an MLP's gate_up,
  // which SiLU·mul reads): a backend may keep each gate row beside its up row
  // and store silu(gate) · up from the product (Backend::stores_silu_mul).
  bool gate_up_halves = false;
  // A backend's own layout in place of the canonical one, 0 for none (the
  // CUDA backend's tensor-core tiles, backend/cuda/w4a16.h: which kind of
  // tiles); only that backend reads it.
  int backend_layout = 0;
  // A second copy in another layout that a backend keeps for products of many
  // rows (the CUDA backend's Hopper GEMM, backend/cuda/w4a16_sm90.h: packed
  // weights, scales, zeros), empty where it keeps none; only that backend
  // reads them. A product reads one of the two copies.
  Tensor gemm_qweight, gemm_scales, gemm_zeros;

  bool defined() const { return qweight.defined(); }
  // Bytes a forward reads: the packed weights, scales and zeros (of the first copy).
  size_t nbytes() const { return qweight.nbytes() + scales.nbytes() + zeros.nbytes(); }
};

// Checks the three host tensors against each other and the layout above;
// throws Error(kInvalidArgument) naming `what`, the expected and the found shape.
void check_quantized_weight(const QuantizedWeight& w, const std::string& what);

// The f32 weight [out, in] of a host QuantizedWeight (the CPU backend computes
// with this; tests use it as the plain reference of the CUDA kernel).
Tensor dequantize_weight(const QuantizedWeight& host);

}  // namespace tessera::backend
