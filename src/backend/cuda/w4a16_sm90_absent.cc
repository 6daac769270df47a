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
void launch_w4a16_sm90(const T*, const uint8_t*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, int, T*,
                       cudaStream_t, bool) {
  absent("launch_w4a16_sm90");
}

template void launch_w4_sm90_pack<__half>(const uint32_t*, const __half*, const uint8_t*, int64_t, int64_t, int64_t,
                                          uint8_t*, __half*, __half*, cudaStream_t);
template void launch_w4_sm90_pack<__nv_bfloat16>(const uint32_t*, const __half*, const uint8_t*, int64_t, int64_t,
                                                 int64_t, uint8_t*, __nv_bfloat16*, __nv_bfloat16*, cudaStream_t);
template void launch_w4a16_sm90<__half>(const __half*, const uint8_t*, const __half*, const __half*, int64_t, int64_t,
                                        int64_t, int64_t, int, __half*, cudaStream_t, bool);
template void launch_w4a16_sm90<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, const __nv_bfloat16*,
                                               const __nv_bfloat16*, int64_t, int64_t, int64_t, int64_t, int,
                                               __nv_bfloat16*, cudaStream_t, bool);

}  // namespace tessera::backend::cuda
