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
// itself. Act-order exports (desc_act) whose g_idx takes inputs out of group
// order would need the activations permuted at run time and are refused;
// with g_idx[i] = i / g the groups are contiguous, as tessera's are.
// The loader repacks into the canonical layout (backend/quantized_weight.h):
// its qweight is the transpose of GPTQ's, word for word.
#pragma once

#include <string>

#include "backend/quantized_weight.h"
#include "model/loader/checkpoint.h"
#include "model/model_spec.h"

namespace tessera::model {

// Reads and repacks `<base>.{qweight,qzeros,scales,g_idx}` of a linear [out, in].
// Throws Error(kInvalidArgument) naming the tensor, the expected and the found
// shape or dtype, and Error(kUnsupported) for an act-order g_idx.
backend::QuantizedWeight read_gptq_linear(const Checkpoint& checkpoint, const std::string& base, int64_t out,
                                          int64_t in, const QuantizationConfig& config);

}  // namespace tessera::model
