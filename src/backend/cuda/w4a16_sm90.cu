// The 4-bit product on Hopper (w4a16_sm90.h): CUTLASS's warp-specialized
// mixed-input GEMM, which loads the 4-bit weights and the activations by TMA
// into shared memory, converts the weights to the activations' type in
// registers (q · scale + zero) and multiplies with wgmma. Written by hand
// here: the weight packing and the launch; the kernel is CUTLASS's
// (chosen over our mma.sync kernels per shape by measurement, w4_linear.cc).
//
// Operands, as CUTLASS's example of this kernel arranges them (its narrow
// operand must be A and K-major): the GEMM is (M, N, K) = (n, m, k) with
//   A = W     [n, k] row-major, 4-bit, reordered (w4a16_sm90.h)
//   B = x     [m, k], which is B [k, m] column-major
//   D = out   [m, n] row-major, which is D [n, m] column-major
// and the scales and zeros [k / g, n] are A's, M-major as CUTLASS requires.
#include "backend/cuda/w4a16_sm90.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/mixed_dtype_utils.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace tessera::backend::cuda {
namespace {

using namespace cute;

template <typename T>
struct CutlassType;
template <>
struct CutlassType<__half> {
  using type = cutlass::half_t;
};
template <>
struct CutlassType<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};

// The weight's layout: CUTLASS's memory reordering atom for a wgmma on E (each
// thread's 8 values of a 16-input k-step in one 32-bit word, nibbles in the
// order 0,2,4,6,1,3,5,7 so that its converter takes them out in pairs),
// tiled over [n, k].
template <class E>
struct WeightLayout {
  using ValueShuffle = Layout<Shape<_2, _4>, Stride<_4, _1>>;
  using Atom = decltype(cutlass::compute_memory_reordering_atom<E, Layout<Shape<_1, _1>>, ValueShuffle>());
  using Stride = cutlass::detail::TagToStrideB_t<cutlass::layout::ColumnMajor>;  // (n, k, l): k contiguous
  using Type = decltype(tile_to_shape(Atom{}, Layout<Shape<int, int, int>, Stride>{}));
  __host__ __device__ static auto make(int n, int k) { return tile_to_shape(Atom{}, make_shape(n, k, 1)); }
};

// Scheduler: void for CUTLASS's persistent data-parallel tiles (one thread
// block an output tile over all of k), cutlass::gemm::StreamKScheduler for
// tiles whose k is split among blocks (w4a16_sm90.h, W4Sm90Variant).
template <class E, int TokenTile, class Scheduler>
struct Sm90Gemm {
  using TileShape = Shape<_128, Int<TokenTile>, _64>;  // weight rows, tokens, k
  using Cluster = Shape<_1, _1, _1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, E, cutlass::layout::ColumnMajor, 8, E,
      cutlass::layout::ColumnMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<cutlass::uint4b_t, E, E>,
      typename WeightLayout<E>::Type, 32, E, cutlass::layout::ColumnMajor, 8, float, TileShape, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// "[m, k] · [n, k]ᵀ in groups of g" (m 0: the weight alone), for messages.
// (fmt's compile-time format strings do not build under nvcc's relaxed constexpr.)
std::string shape(int64_t m, int64_t n, int64_t k, int64_t g) {
  const std::string weight = "[" + std::to_string(n) + ", " + std::to_string(k) + "]";
  return (m ? "[" + std::to_string(m) + ", " + std::to_string(k) + "] · " + weight + "ᵀ" : weight) + " in groups of " +
         std::to_string(g);
}

// The kernel's arguments for out [m, n] (=|+=) x · Wᵀ, its k split as asked.
template <class G, class E>
typename G::Adapter::Arguments arguments(const E* x, const uint8_t* packed, const E* scales, const E* zeros, int m,
                                         int n, int k, int g, E* out, bool accumulate, int splits) {
  const auto stride_x = cutlass::make_cute_packed_stride(typename G::Kernel::StrideB{}, make_shape(m, k, 1));
  const auto stride_out = cutlass::make_cute_packed_stride(typename G::Kernel::StrideD{}, make_shape(n, m, 1));
  const auto stride_scales =
      cutlass::make_cute_packed_stride(typename G::Mainloop::StrideScale{}, make_shape(n, k / g, 1));
  typename G::Adapter::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {n, m, k, 1},
      {reinterpret_cast<const cutlass::uint4b_t*>(packed), WeightLayout<E>::make(n, k), x, stride_x, scales,
       stride_scales, g, zeros},
      {{1.0f, accumulate ? 1.0f : 0.0f}, out, stride_out, out, stride_out}};
  if constexpr (!std::is_void_v<typename G::Kernel::TileSchedulerTag>) {
    using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
    args.scheduler.splits = splits > 1 ? splits : 1;
    args.scheduler.decomposition_mode = splits > 1 ? Mode::SplitK : Mode::StreamK;
    // Partial sums meet in k's order: the same bits every call.
    args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
  }
  return args;
}

template <class E, int TokenTile, class Scheduler>
size_t gemm_workspace_bytes(int m, int n, int k, int g, int splits) {
  using G = Sm90Gemm<E, TokenTile, Scheduler>;
  return G::Adapter::get_workspace_size(
      arguments<G, E>(nullptr, nullptr, nullptr, nullptr, m, n, k, g, nullptr, false, splits));
}

// Zeroes `count` words from `words`.
__global__ void clear_words(uint32_t* words, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    words[i] = 0;
  }
}

// Where the split kernel's locks lie in its workspace: after the partial
// sums, as CUTLASS's stream-K fixup finds them (sm90_tile_scheduler_stream_k.hpp,
// fixup_helper): [offset, offset + bytes). nullopt where that layout does not
// account for the whole workspace (another CUTLASS), so the caller clears
// them CUTLASS's way.
template <class G>
std::optional<std::pair<size_t, size_t>> lock_range(const typename G::Kernel::Params& params, size_t workspace_bytes) {
  using SchedulerParams = typename G::Kernel::TileSchedulerParams;
  const SchedulerParams& p = params.scheduler;
  const uint64_t tiles = p.divmod_splits_.divisor > 1     ? p.units_per_problem_
                         : p.requires_separate_reduction() ? p.sk_tiles_ * SchedulerParams::max_peers_per_tile(
                                                                                p.sk_units_, p.sk_tiles_)
                                                           : p.sk_tiles_;
  const size_t offset = SchedulerParams::get_reduction_workspace_size(
      tiles, cutlass::gemm::to_gemm_coord(typename G::TileShape{}),
      cutlass::sizeof_bits<float>::value);
  const size_t bytes = SchedulerParams::get_barrier_workspace_size(
      tiles, G::Kernel::NumMmaWarpGroups, cutlass::sizeof_bits<typename G::Kernel::TileScheduler::BarrierType>::value);
  if (offset + bytes != workspace_bytes || bytes % 4 != 0) return std::nullopt;
  return std::make_pair(offset, bytes);
}

template <class E, int TokenTile, class Scheduler>
void run_gemm(const E* x, const uint8_t* packed, const E* scales, const E* zeros, int m, int n, int k, int g, E* out,
              cudaStream_t stream, bool accumulate, int splits, void* workspace, size_t workspace_bytes) {
  using G = Sm90Gemm<E, TokenTile, Scheduler>;
  const auto args = arguments<G, E>(x, packed, scales, zeros, m, n, k, g, out, accumulate, splits);
  const size_t needed = G::Adapter::get_workspace_size(args);
  typename G::Adapter gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status == cutlass::Status::kSuccess && needed > workspace_bytes) status = cutlass::Status::kErrorWorkspaceNull;
  if (status == cutlass::Status::kSuccess) {
    // CUTLASS's initialize() clears a split kernel's locks with a memset,
    // which in a CUDA graph took about 1.5 µs of host time a node at each
    // replay (an H100's 4-bit step at 128 rows: 156 against 13 µs); a kernel
    // node clears them instead where the workspace's layout is as expected.
    typename G::Kernel::Params params = G::Kernel::to_underlying_arguments(args, workspace);
    std::optional<std::pair<size_t, size_t>> locks;
    if constexpr (!std::is_void_v<Scheduler>) {
      if (needed > 0) locks = lock_range<G>(params, needed);
    }
    if (needed > 0 && !locks) {
      status = gemm.initialize(args, workspace, stream);
      if (status == cutlass::Status::kSuccess) status = gemm.run(stream);
    } else {
      if (locks && locks->second > 0) {
        const int64_t words = int64_t(locks->second / 4);
        clear_words<<<unsigned(std::min<int64_t>((words + 255) / 256, 64)), 256, 0, stream>>>(
            reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(workspace) + locks->first), words);
        TESSERA_CUDA_CHECK(cudaGetLastError());
      }
      constexpr int kSharedBytes = G::Kernel::SharedStorageSize;
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(cutlass::device_kernel<typename G::Kernel>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
      status = G::Adapter::run(params, stream);
    }
  }
  if (status != cutlass::Status::kSuccess) {
    throw Error(ErrorKind::kInternal, "w4a16_sm90: CUTLASS cannot run " + shape(m, n, k, g) + " at a token tile of " +
                                          std::to_string(TokenTile) + ", split " + std::to_string(splits) + ": " +
                                          cutlassGetStatusString(status));
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

// Calls f.template operator()<TokenTile, Scheduler>() for a variant.
template <class F>
auto with_variant(W4Sm90Variant variant, const F& f) {
  auto by_scheduler = [&]<int TokenTile>() {
    if (variant.splits == kW4Sm90WholeTiles) return f.template operator()<TokenTile, void>();
    return f.template operator()<TokenTile, cutlass::gemm::StreamKScheduler>();
  };
  switch (variant.token_tile) {
    case 16: return by_scheduler.template operator()<16>();
    case 32: return by_scheduler.template operator()<32>();
    case 64: return by_scheduler.template operator()<64>();
    case 128: return by_scheduler.template operator()<128>();
    default:
      throw Error(ErrorKind::kInternal,
                  "w4a16_sm90: no kernel of " + std::to_string(variant.token_tile) + " token rows");
  }
}

// One thread a canonical word (8 inputs of a row): each nibble goes to its
// place in the reordered layout. Nibbles of one byte come from different
// words, so they are OR-ed into a zeroed buffer.
template <class E>
__global__ void pack_kernel(const uint32_t* qweight, int n, int k, uint32_t* packed) {
  const auto layout = WeightLayout<E>::make(n, k);
  const int64_t words = int64_t(n) * (k / 8);
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < words;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int row = int(idx / (k / 8)), first = int(idx % (k / 8)) * 8;
    const uint32_t word = qweight[idx];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t offset = layout(row, first + i, 0);
      atomicOr(&packed[offset / 8], ((word >> (4 * i)) & 0xFu) << (4 * (offset % 8)));
    }
  }
}

// scales and zeros [n, k / g] (f16, u8) -> [k / g, n] in T, zero as -zero · scale.
template <typename T>
__global__ void scale_zero_kernel(const __half* scales, const uint8_t* zeros, int64_t n, int64_t groups,
                                  T* gemm_scales, T* gemm_zeros) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n * groups;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t group = idx / n, row = idx % n;
    const float scale = __half2float(scales[row * groups + group]);
    gemm_scales[idx] = T(scale);
    gemm_zeros[idx] = T(-float(zeros[row * groups + group]) * scale);
  }
}

unsigned blocks_for(int64_t work) {
  return static_cast<unsigned>(std::min<int64_t>((work + 255) / 256, 65536));
}

// Shapes the launcher takes.
void check_shape(int64_t m, int64_t n, int64_t k, int64_t group_size) {
  if (!w4_sm90_supported(n, k, group_size) || m <= 0 || m > std::numeric_limits<int32_t>::max() / 2) {
    throw Error(ErrorKind::kInternal, "w4a16_sm90: " + shape(m, n, k, group_size) + " is not a shape of this kernel");
  }
}

}  // namespace

bool w4_sm90_built() { return true; }

bool w4_sm90_supported(int64_t n, int64_t k, int64_t group_size) {
  return n > 0 && k > 0 && n % 128 == 0 && k % 64 == 0 && group_size % 64 == 0 && k % group_size == 0 &&
         n * k < std::numeric_limits<int32_t>::max();
}

template <typename T>
void launch_w4_sm90_pack(const uint32_t* qweight, const __half* scales, const uint8_t* zeros, int64_t n, int64_t k,
                         int64_t group_size, uint8_t* packed, T* gemm_scales, T* gemm_zeros, cudaStream_t stream) {
  if (!w4_sm90_supported(n, k, group_size)) {
    throw Error(ErrorKind::kInternal, "w4a16_sm90: no Hopper layout for " + shape(0, n, k, group_size));
  }
  using E = typename CutlassType<T>::type;
  TESSERA_CUDA_CHECK(cudaMemsetAsync(packed, 0, static_cast<size_t>(n * k / 2), stream));
  pack_kernel<E><<<blocks_for(n * k / 8), 256, 0, stream>>>(qweight, int(n), int(k),
                                                             reinterpret_cast<uint32_t*>(packed));
  TESSERA_CUDA_CHECK(cudaGetLastError());
  scale_zero_kernel<T><<<blocks_for(n * (k / group_size)), 256, 0, stream>>>(scales, zeros, n, k / group_size,
                                                                            gemm_scales, gemm_zeros);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
size_t w4a16_sm90_workspace_bytes(int64_t m, int64_t n, int64_t k, int64_t group_size, W4Sm90Variant variant) {
  check_shape(m, n, k, group_size);
  using E = typename CutlassType<T>::type;
  return with_variant(variant, [&]<int TokenTile, class Scheduler>() {
    return gemm_workspace_bytes<E, TokenTile, Scheduler>(int(m), int(n), int(k), int(group_size), variant.splits);
  });
}

template <typename T>
void launch_w4a16_sm90(const T* x, const uint8_t* packed, const T* gemm_scales, const T* gemm_zeros, int64_t m,
                       int64_t n, int64_t k, int64_t group_size, W4Sm90Variant variant, void* workspace,
                       size_t workspace_bytes, T* out, cudaStream_t stream, bool accumulate) {
  check_shape(m, n, k, group_size);
  using E = typename CutlassType<T>::type;
  with_variant(variant, [&]<int TokenTile, class Scheduler>() {
    run_gemm<E, TokenTile, Scheduler>(reinterpret_cast<const E*>(x), packed, reinterpret_cast<const E*>(gemm_scales),
                                      reinterpret_cast<const E*>(gemm_zeros), int(m), int(n), int(k), int(group_size),
                                      reinterpret_cast<E*>(out), stream, accumulate, variant.splits, workspace,
                                      workspace_bytes);
  });
}

TESSERA_W4_SM90_INSTANTIATE(__half)
TESSERA_W4_SM90_INSTANTIATE(__nv_bfloat16)

}  // namespace tessera::backend::cuda
