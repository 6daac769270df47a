// Which prefill attention kernel runs for a launch: FlashInfer's Hopper kernel
// (attention_prefill_sm90.cu), the tensor-core kernel (attention_prefill_mma.cu)
// or the scalar one (attention_prefill.cu).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::backend::cuda {

// True for the tensor-core kernel: under PrefillAttentionKernel::kAuto when
// dtype is f16 or bf16, head_dim 64 or 128 and image_arch (the loaded image of
// that kernel, 0 if none) is 80 or more. Forced kTensorCore where that does not
// hold throws Error(kUnsupported) saying which condition fails. Logs the first
// choice of each kind once.
bool use_tensor_core_prefill(DType dtype, int64_t head_dim, int image_arch);

// True for FlashInfer's sm_90a kernel: under kAuto when this build holds it,
// the device has compute capability 9.0 exactly (sm_90a code runs nowhere
// else), dtype is bf16, head_dim 128, there is no sliding window and
// TESSERA_SM90_PREFILL is not "0". Forced (kFlashInfer) where that does not
// hold throws Error(kUnsupported) saying which condition fails; kScalar and
// kTensorCore never take it. Logs the first choice of each kind once.
bool use_sm90_prefill(DType dtype, int64_t head_dim, int64_t window, int device_capability);

}  // namespace tessera::backend::cuda
