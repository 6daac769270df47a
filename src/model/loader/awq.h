// AWQ checkpoints (AutoAWQ's GEMM layout, as LMDeploy's `lite auto_awq`
// writes it): every quantized linear `<name>` of [out, in] is three tensors
//   <name>.qweight  i32 [in, out / 8]
//   <name>.qzeros   i32 [in / group, out / 8]
//   <name>.scales   f16 [in / group, out]
// where nibble j (bits 4j .. 4j + 3) of the int32 in column c holds output
// channel 8c + kAwqOrder[j]. The loader repacks them into tessera's canonical
// layout (backend/quantized_weight.h: rows are output channels, natural
// nibble order along the input), so splitting by heads or ranks is a split of
// rows or of whole groups, as for 16-bit weights.
#pragma once

#include <string>

#include "backend/quantized_weight.h"
#include "model/loader/checkpoint.h"

namespace tessera::model {

inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// Reads and repacks `<base>.{qweight,qzeros,scales}` of a linear [out, in].
// Throws Error(kInvalidArgument) naming the tensor, the expected and the found
// shape or dtype.
backend::QuantizedWeight read_awq_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out,
                                         int64_t in, int64_t group_size);

// The three AWQ tensors of a canonical host QuantizedWeight (the inverse of
// read_awq_linear; what `lite auto_awq` writes).
struct AwqTensors {
  Tensor qweight;  // i32 [in, out / 8]
  Tensor qzeros;   // i32 [in / group, out / 8]
  Tensor scales;   // f16 [in / group, out]
};
AwqTensors to_awq_tensors(const backend::QuantizedWeight& weight);

// Canonical QuantizedWeight <-> AWQ packing of one matrix [rows, out] of
// 4-bit values (rows: inputs for qweight, groups for qzeros).
//   unpack: awq i32 [rows, out / 8] -> values u8 [out, rows] (transposed)
void unpack_awq_matrix(const int32_t* awq, int64_t rows, int64_t out, uint8_t* values);
//   pack:   values u8 [out, rows] -> awq i32 [rows, out / 8]
void pack_awq_matrix(const uint8_t* values, int64_t rows, int64_t out, int32_t* awq);

}  // namespace tessera::model
