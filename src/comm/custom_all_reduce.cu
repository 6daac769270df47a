// The custom collectives (see custom_all_reduce.h for the design). Element
// loops work on packs of 16 bytes when the output is 16-byte aligned and the
// count a whole number of packs (the staging buffers always are), else on
// single elements; peer buffers are read with ld.global.cg so no stale L1 line
// of an earlier call is ever used.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "comm/custom_all_reduce.h"
#include "core/error.h"

namespace tessera::comm::cuda {

namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ void store_release(uint32_t* address, uint32_t value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* address) {
  uint32_t value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Block b of this rank meets block b of every rank at `phase`. False in every
// thread of the block when the group was aborted or a peer did not come.
__device__ bool barrier(const PeerBuffers& peers, int rank, int world, int phase, uint32_t flag,
                        const SyncControl& control) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = kStatusOk;
  __syncthreads();  // the block's writes so far precede the flag (with the fence below)
  if (threadIdx.x < world) {
    __threadfence_system();
    store_release(&peers.signal[threadIdx.x]->flags[phase][blockIdx.x][rank], flag);
    const uint32_t* mine = &peers.signal[rank]->flags[phase][blockIdx.x][threadIdx.x];
    unsigned long long start = 0;
    unsigned spins = 0;
    while (load_acquire(mine) != flag) {
      if ((++spins & 255u) != 0) continue;
      if (*control.abort) {
        failed = kStatusAborted;
        break;
      }
      const unsigned long long now = global_ns();
      if (start == 0) {
        start = now;
      } else if (now - start > control.timeout_ns) {
        failed = kStatusTimedOut;
        break;
      }
    }
  }
  __syncthreads();
  const int result = failed;
  if (result != kStatusOk && threadIdx.x == 0) *control.status = result;
  return result == kStatusOk;
}

__device__ __forceinline__ uint32_t begin_epoch(const PeerBuffers& peers, int rank) {
  return peers.signal[rank]->epoch[blockIdx.x] + 1;
}

__device__ __forceinline__ void end_epoch(const PeerBuffers& peers, int rank, uint32_t flag) {
  if (threadIdx.x == 0) peers.signal[rank]->epoch[blockIdx.x] = flag;
}

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// V elements of T as one load/store.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_cg(const void* base, int64_t index) {
  Pack<T, V> pack;
  if constexpr (sizeof(Pack<T, V>) == 16) {
    const uint4 bits = __ldcg(reinterpret_cast<const uint4*>(base) + index);
    memcpy(&pack, &bits, 16);
  } else if constexpr (sizeof(Pack<T, V>) == 4) {
    const unsigned int bits = __ldcg(reinterpret_cast<const unsigned int*>(base) + index);
    memcpy(&pack, &bits, 4);
  } else {
    static_assert(sizeof(Pack<T, V>) == 2);
    const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(base) + index);
    memcpy(&pack, &bits, 2);
  }
  return pack;
}

// Σ over ranks 0..world-1 of pack `index` of `sources`, in f32, rounded once.
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> sum_pack(void* const* sources, int world, int64_t index) {
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  for (int g = 0; g < world; ++g) {
    const Pack<T, V> x = load_cg<T, V>(sources[g], index);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += to_float(x.v[k]);
  }
  Pack<T, V> out;
#pragma unroll
  for (int k = 0; k < V; ++k) out.v[k] = from_float<T>(acc[k]);
  return out;
}

template <typename T, int V>
__global__ void one_shot_kernel(PeerBuffers peers, int rank, int world, int64_t packs, T* out, SyncControl control) {
  const uint32_t flag = begin_epoch(peers, rank);
  if (!barrier(peers, rank, world, 0, flag, control)) return;
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs; p += int64_t{gridDim.x} * blockDim.x) {
    reinterpret_cast<Pack<T, V>*>(out)[p] = sum_pack<T, V>(peers.data, world, p);
  }
  if (!barrier(peers, rank, world, 2, flag, control)) return;
  end_epoch(peers, rank, flag);
}

// part: packs per rank (the last rank's part may be cut short by `packs`).
template <typename T, int V>
__global__ void two_shot_kernel(PeerBuffers peers, int rank, int world, int64_t packs, int64_t part, T* out,
                                SyncControl control) {
  const uint32_t flag = begin_epoch(peers, rank);
  if (!barrier(peers, rank, world, 0, flag, control)) return;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  {
    // Reduce-scatter: this rank's part, from every rank's data, into its tmp.
    void* sources[kMaxRanks];
    const int64_t begin = rank * part;
    for (int g = 0; g < world; ++g) sources[g] = reinterpret_cast<Pack<T, V>*>(peers.data[g]) + begin;
    const int64_t end = min(packs, begin + part);
    for (int64_t j = first; begin + j < end; j += stride) {
      reinterpret_cast<Pack<T, V>*>(peers.tmp[rank])[j] = sum_pack<T, V>(sources, world, j);
    }
  }
  if (!barrier(peers, rank, world, 1, flag, control)) return;
  // All-gather: every rank's reduced part, at the same relative indices this block wrote above.
  for (int64_t j = first; j < part; j += stride) {
    for (int g = 0; g < world; ++g) {
      const int64_t p = g * part + j;
      if (p < packs) reinterpret_cast<Pack<T, V>*>(out)[p] = load_cg<T, V>(peers.tmp[g], j);
    }
  }
  if (!barrier(peers, rank, world, 2, flag, control)) return;
  end_epoch(peers, rank, flag);
}

// Copies `units` (uint4 or bytes) from each selected source to out + g·stride.
// first_rank..last_rank are the sources (all ranks for a gather, the root for a broadcast).
template <typename U>
__global__ void copy_kernel(PeerBuffers peers, int rank, int world, int first_rank, int last_rank, int64_t units,
                            U* out, int64_t out_stride_units, SyncControl control) {
  const uint32_t flag = begin_epoch(peers, rank);
  if (!barrier(peers, rank, world, 0, flag, control)) return;
  for (int g = first_rank; g <= last_rank; ++g) {
    const U* source = reinterpret_cast<const U*>(peers.data[g]);
    U* target = out + (g - first_rank) * out_stride_units;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < units; i += int64_t{gridDim.x} * blockDim.x) {
      target[i] = __ldcg(source + i);
    }
  }
  if (!barrier(peers, rank, world, 2, flag, control)) return;
  end_epoch(peers, rank, flag);
}

__global__ void barrier_kernel(PeerBuffers peers, int rank, int world, SyncControl control) {
  const uint32_t flag = begin_epoch(peers, rank);
  if (!barrier(peers, rank, world, 0, flag, control)) return;
  end_epoch(peers, rank, flag);
}

int grid_for(int64_t work_items, const SyncControl& control) {
  const int64_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, std::min(control.max_blocks, kMaxBlocks)));
}

void check_launch(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    throw Error(ErrorKind::kDeviceFailure, std::string("custom collective ") + what + ": " + cudaGetErrorString(error));
  }
}

void check_world(int world) {
  if (world < 1 || world > kMaxRanks) {
    throw Error(ErrorKind::kInvalidArgument,
                "the custom collectives take 1 to " + std::to_string(kMaxRanks) + " ranks, not " + std::to_string(world));
  }
}

template <typename T>
void all_reduce_typed(const PeerBuffers& peers, int rank, int world, int64_t count, void* out, bool two_shot,
                      const SyncControl& control, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vector = count % kVec == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  auto run = [&](auto pack_tag) {
    constexpr int V = decltype(pack_tag)::value;
    const int64_t packs = count / V;
    T* typed = static_cast<T*>(out);
    if (two_shot) {
      const int64_t part = (packs + world - 1) / world;
      two_shot_kernel<T, V><<<grid_for(part, control), kThreads, 0, stream>>>(peers, rank, world, packs, part, typed,
                                                                             control);
    } else {
      one_shot_kernel<T, V><<<grid_for(packs, control), kThreads, 0, stream>>>(peers, rank, world, packs, typed,
                                                                              control);
    }
  };
  if (vector) {
    run(std::integral_constant<int, kVec>{});
  } else {
    run(std::integral_constant<int, 1>{});
  }
  check_launch(two_shot ? "two-shot all-reduce" : "one-shot all-reduce");
}

void copy_from_peers(const PeerBuffers& peers, int rank, int world, int first, int last, size_t bytes, void* out,
                     size_t out_stride, const SyncControl& control, cudaStream_t stream) {
  const bool vector = bytes % 16 == 0 && out_stride % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vector) {
    const int64_t units = static_cast<int64_t>(bytes / 16);
    copy_kernel<uint4><<<grid_for(units, control), kThreads, 0, stream>>>(
        peers, rank, world, first, last, units, static_cast<uint4*>(out), static_cast<int64_t>(out_stride / 16),
        control);
  } else {
    const int64_t units = static_cast<int64_t>(bytes);
    copy_kernel<unsigned char><<<grid_for(units, control), kThreads, 0, stream>>>(
        peers, rank, world, first, last, units, static_cast<unsigned char*>(out), static_cast<int64_t>(out_stride),
        control);
  }
  check_launch("copy");
}

}  // namespace

void launch_all_reduce(const PeerBuffers& peers, int rank, int world, ElementType type, int64_t count, void* out,
                       bool two_shot, const SyncControl& control, cudaStream_t stream) {
  check_world(world);
  switch (type) {
    case ElementType::kF32: all_reduce_typed<float>(peers, rank, world, count, out, two_shot, control, stream); return;
    case ElementType::kF16: all_reduce_typed<__half>(peers, rank, world, count, out, two_shot, control, stream); return;
    case ElementType::kBF16:
      all_reduce_typed<__nv_bfloat16>(peers, rank, world, count, out, two_shot, control, stream);
      return;
  }
}

void launch_gather(const PeerBuffers& peers, int rank, int world, size_t bytes, void* out, size_t out_stride_bytes,
                   const SyncControl& control, cudaStream_t stream) {
  check_world(world);
  copy_from_peers(peers, rank, world, 0, world - 1, bytes, out, out_stride_bytes, control, stream);
}

void launch_broadcast(const PeerBuffers& peers, int rank, int world, int root, size_t bytes, void* out,
                      const SyncControl& control, cudaStream_t stream) {
  check_world(world);
  copy_from_peers(peers, rank, world, root, root, bytes, out, 0, control, stream);
}

void launch_barrier(const PeerBuffers& peers, int rank, int world, const SyncControl& control, cudaStream_t stream) {
  check_world(world);
  barrier_kernel<<<1, kThreads, 0, stream>>>(peers, rank, world, control);
  check_launch("barrier");
}

}  // namespace tessera::comm::cuda
