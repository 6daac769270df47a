// Programmatic dependent launch (sm_90): the kernels of a decode step are
// small, and back to back the GPU idles between them while the next one is
// launched. A kernel launched with launch_after() is launched while the
// previous kernel of its stream is still running and waits for that kernel's
// results (completion and memory) at wait_for_previous_kernel(), which every
// such kernel calls before it reads anything a predecessor writes. The
// decode-step kernels with spare room let their successor launch early
// (allow_next_kernel): decode attention, RoPE, RMSNorm and SiLU·mul at their
// start (at decode sizes they use few SMs), the GEMV after its weight loop;
// and the GEMV issues its first weight loads (which no kernel writes) before
// it waits, so they are in flight while the previous kernel finishes. Every
// kernel triggers only after its own wait, so a kernel that starts finds all
// work before its predecessor done: what only earlier kernels and copies
// wrote (decode attention's cached rows of earlier tokens, the positions and
// block tables) may be read before the wait too. Triggering at the start of
// every kernel, with nothing to do before the wait, was slower for 4-bit
// decode (3.03 against 2.95 ms a step): the waiting blocks took room the
// running ones needed.
// Where the device or the loaded kernel image is older than sm_90 (a
// compute_75 PTX build JIT-compiled on a Hopper lacks the wait instruction),
// or TESSERA_PDL=0, launch_after() is a plain launch and the wait a no-op;
// TESSERA_PDL_EARLY=0 keeps the launch but drops the early triggers.
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

// Lets the next kernel of the stream be launched once every block of this one
// has called it (or exited); the next kernel still waits for this one's
// results at wait_for_previous_kernel().
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Unless TESSERA_PDL_EARLY=0: GEMVs load their first weights before they
// wait, and the kernels above let their successors launch early.
bool early_successor_launch();

}  // namespace tessera::backend::cuda
