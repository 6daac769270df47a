// The Hopper 4-bit GEMM's entry points in a build without it (no
// architecture 90, or no CUTLASS headers at configure time): nothing is
// supported, so W4Linear never makes its copy or calls its launcher.
#include <string>

#include "backend/cuda/w4a16_sm90.h"
#include "core/error.h"

namespace tessera::backend::cuda {

bool w4_sm90_built() { return false; }

bool w4_sm90_supported(int64_t, int64_t, int64_t) { return false; }

namespace {
[[noreturn]] void absent(const char* what) {
  throw Error(ErrorKind::kInternal, std::string(what) + ": this build holds no Hopper 4-bit GEMM");
}
}  // namespace

template <typename T>
void launch_w4_sm90_pack(const uint32_t*, const __half*, const uint8_t*, int64_t, int64_t, int64_t, uint8_t*, T*, T*,
                         cudaStream_t) {
  absent("launch_w4_sm90_pack");
}

template <typename T>
size_t w4a16_sm90_workspace_bytes(int64_t, int64_t, int64_t, int64_t, W4Sm90Variant) {
  absent("w4a16_sm90_workspace_bytes");
}

template <typename T>
void launch_w4a16_sm90(const T*, const uint8_t*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,
                       W4Sm90Variant, void*, size_t, T*, cudaStream_t, bool) {
  absent("launch_w4a16_sm90");
}

TESSERA_W4_SM90_INSTANTIATE(__half)
TESSERA_W4_SM90_INSTANTIATE(__nv_bfloat16)

}  // namespace tessera::backend::cuda
