// Programmatic dependent launch (sm_90): the kernels of a decode step are
// small, and back to back the GPU idles between them while the next one is
// launched. A kernel launched with launch_after() is launched while the
// previous kernel of its stream is still running and waits for that kernel's
// results (completion and memory) at wait_for_previous_kernel(), which every
// such kernel calls before it reads or writes anything. No kernel triggers its
// successor early (griddepcontrol.launch_dependents): on the H200 that was
// slower for 4-bit decode (3.03 against 2.95 ms a step), the waiting blocks
// taking room the running ones need; the launch alone gives 2.91-2.95
// against 2.96-3.06 ms, and nothing measurable in bf16 (docs/BENCHMARKS.md).
// Where
// the device or the loaded kernel image is older than sm_90 (a compute_75 PTX
// build JIT-compiled on a Hopper lacks the wait instruction), or
// TESSERA_PDL=0, launch_after() is a plain launch and the wait a no-op.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace tessera::backend::cuda {

// For the current device: sm_90 or newer, the kernels compiled for it, and
// TESSERA_PDL not "0". Cached per device.
bool programmatic_launch_enabled();

template <typename... Params, typename... Args>
void launch_after(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                  Args... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic_launch_enabled() ? 1 : 0;
  TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

// First statement of every kernel launched with launch_after().
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace tessera::backend::cuda
