// The CUDA entry points of a build without the CUDA backend (TESSERA_CUDA=OFF or
// no nvcc): they say so instead of failing to link.
#include "backend/backend.h"
#include "core/error.h"

namespace tessera::backend {

std::unique_ptr<Backend> make_cuda_backend(int, DType) {
  throw Error(ErrorKind::kUnsupported, "this tessera was built without the CUDA backend",
              "rebuild with the CUDA toolkit installed (make build TESSERA_CUDA=ON), or use --device cpu");
}

int cuda_device_count() { return 0; }

bool flashinfer_prefill_built() { return false; }

CudaDeviceInfo cuda_device_info(int index) {
  throw Error(ErrorKind::kUnsupported, "this tessera was built without the CUDA backend (asked for cuda:" +
                                           std::to_string(index) + ")",
              "rebuild with the CUDA toolkit installed, or use --device cpu");
}

}  // namespace tessera::backend
