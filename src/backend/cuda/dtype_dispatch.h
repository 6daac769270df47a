// The storage type behind a DType, for the CUDA backend's host code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace tessera::backend::cuda {

// Calls fn(T{}) with T the storage type of `dtype`.
template <typename Fn>
void dispatch(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: fn(float{}); return;
    case DType::kF16: fn(__half{}); return;
    case DType::kBF16: fn(__nv_bfloat16{}); return;
    default: break;
  }
  throw Error(ErrorKind::kUnsupported, std::string("the CUDA backend has no kernels for ") + dtype_name(dtype));
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace tessera::backend::cuda
