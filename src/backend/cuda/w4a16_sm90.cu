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

#include <limits>
#include <string>

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

template <class E, int TokenTile>
struct Sm90Gemm {
  using TileShape = Shape<_128, Int<TokenTile>, _64>;
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
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// "[m, k] · [n, k]ᵀ in groups of g" (m 0: the weight alone), for messages.
// (fmt's compile-time format strings do not build under nvcc's relaxed constexpr.)
std::string shape(int64_t m, int64_t n, int64_t k, int64_t g) {
  const std::string weight = "[" + std::to_string(n) + ", " + std::to_string(k) + "]";
  return (m ? "[" + std::to_string(m) + ", " + std::to_string(k) + "] · " + weight + "ᵀ" : weight) + " in groups of " +
         std::to_string(g);
}

template <class E, int TokenTile>
void run_gemm(const E* x, const uint8_t* packed, const E* scales, const E* zeros, int m, int n, int k, int g, E* out,
              cudaStream_t stream, bool accumulate) {
  using G = Sm90Gemm<E, TokenTile>;
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
  typename G::Adapter gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status == cutlass::Status::kSuccess && G::Adapter::get_workspace_size(args) != 0) {
    status = cutlass::Status::kErrorWorkspaceNull;  // data-parallel tiles need none; none is given
  }
  if (status == cutlass::Status::kSuccess) status = gemm.initialize(args, nullptr, stream);
  if (status == cutlass::Status::kSuccess) status = gemm.run(stream);
  if (status != cutlass::Status::kSuccess) {
    throw Error(ErrorKind::kInternal, "w4a16_sm90: CUTLASS cannot run " + shape(m, n, k, g) + " at a token tile of " +
                                          std::to_string(TokenTile) + ": " + cutlassGetStatusString(status));
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
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
void launch_w4a16_sm90(const T* x, const uint8_t* packed, const T* gemm_scales, const T* gemm_zeros, int64_t m,
                       int64_t n, int64_t k, int64_t group_size, int token_tile, T* out, cudaStream_t stream,
                       bool accumulate) {
  if (!w4_sm90_supported(n, k, group_size) || m <= 0 || m > std::numeric_limits<int32_t>::max() / 2) {
    throw Error(ErrorKind::kInternal, "w4a16_sm90: " + shape(m, n, k, group_size) + " is not a shape of this kernel");
  }
  using E = typename CutlassType<T>::type;
  const auto* ex = reinterpret_cast<const E*>(x);
  const auto* es = reinterpret_cast<const E*>(gemm_scales);
  const auto* ez = reinterpret_cast<const E*>(gemm_zeros);
  auto* eo = reinterpret_cast<E*>(out);
  const int mi = int(m), ni = int(n), ki = int(k), g = int(group_size);
  switch (token_tile) {
    case 16: return run_gemm<E, 16>(ex, packed, es, ez, mi, ni, ki, g, eo, stream, accumulate);
    case 32: return run_gemm<E, 32>(ex, packed, es, ez, mi, ni, ki, g, eo, stream, accumulate);
    case 64: return run_gemm<E, 64>(ex, packed, es, ez, mi, ni, ki, g, eo, stream, accumulate);
    case 128: return run_gemm<E, 128>(ex, packed, es, ez, mi, ni, ki, g, eo, stream, accumulate);
    default:
      throw Error(ErrorKind::kInternal, "w4a16_sm90: no kernel of " + std::to_string(token_tile) + " token rows");
  }
}

TESSERA_W4_SM90_INSTANTIATE(__half)
TESSERA_W4_SM90_INSTANTIATE(__nv_bfloat16)

}  // namespace tessera::backend::cuda
