// GPTQ checkpoints (AutoGPTQ's and GPTQModel's layout, as Hugging Face's
// optimum and the published *-GPTQ-Int4 models store them): every quantized
// linear `<name>` of [out, in] with groups of g inputs is
//   <name>.qweight  i32 [in / 8, out]    nibble i (bits 4i .. 4i + 3) of row r
//                                         holds input 8r + i (natural order)
//   <name>.qzeros   i32 [in / g, out / 8] nibble j of column c holds output 8c + j
//   <name>.scales   f16 [in / g, out]
//   <name>.g_idx    i32 [in]              input i's group (optional)
// and w[o][i] = (q - zero) * scale, where checkpoint_format "gptq" (the
// default) stores each zero minus one, modulo 16, and "gptq_v2" the zero
// itself. With desc_act false g_idx[i] must be i / g: contiguous groups, as
// tessera's 4-bit layout has them, and the loader repacks into that layout
// (backend/quantized_weight.h; its qweight is the transpose of GPTQ's, word
// for word). Act-order exports (desc_act true) put inputs in groups out of
// order; their linears are dequantized to 16-bit at load
// (QuantizationConfig::kept_four_bit).
#pragma once

#include <string>

#include "backend/quantized_weight.h"
#include "model/loader/checkpoint.h"
#include "model/model_spec.h"

namespace tessera::model {

// Reads and repacks `<base>.{qweight,qzeros,scales,g_idx}` of a linear [out, in].
// Throws Error(kInvalidArgument) naming the tensor, the expected and the found
// shape or dtype, or an input whose group is out of order.
backend::QuantizedWeight read_gptq_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out,
                                          int64_t in, const QuantizationConfig& config);

// The f32 weight [out, in] of a linear, each input in the group g_idx gives
// it (act-order exports), or i / g without a g_idx.
Tensor dequantize_gptq_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out, int64_t in,
                              const QuantizationConfig& config);

}  // namespace tessera::model
