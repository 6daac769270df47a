// Which prefill attention kernel runs for a launch: the tensor-core kernel
// (attention_prefill_mma.cu) or the scalar one (attention_prefill.cu).
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

}  // namespace tessera::backend::cuda
