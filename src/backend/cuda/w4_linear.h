// The CUDA backend's 4-bit (AWQ, W4A16) linears: the upload of a checkpoint's
// packed weights (repacked into the tensor-core kernel's tiles where the
// kernel image and the shape allow, w4a16.h) and out (=|+=) x · dequantize(w)ᵀ
// by the fastest of the candidate kernels, timed at each shape's first call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/w4a16.h"
#include "backend/cuda/w4a16_sm90.h"
#include "backend/quantized_weight.h"
#include "core/buffer.h"
#include "core/tensor.h"

namespace tessera::backend::cuda {

// Whether a model's weights (weight_bytes, with packed_bytes of 4-bit
// linears among them) leave, kept with a second copy of the 4-bit ones, a
// quarter of the device's memory for the KV cache and the steps' workspace,
// and at least `reserved` (what a memory plan made before the load has
// already promised them). free, total: the device's memory before the upload.
// ranks_sharing > 1: tensor-parallel ranks on one device, each loading a
// share like this one and deciding alike; the others' shares and copies are
// kept free too. (A rank that measures free after a peer's load counts that
// peer twice: it keeps one copy where both might have fit, never the reverse.)
// The other ranks' weights and copies where ranks_sharing ranks load alike.
inline size_t peer_shares_bytes(size_t weight_bytes, size_t packed_bytes, int ranks_sharing) {
  return (weight_bytes + packed_bytes) * static_cast<size_t>(std::max(ranks_sharing, 1) - 1);
}
inline bool second_copies_fit(size_t free, size_t total, size_t weight_bytes, size_t packed_bytes,
                              size_t reserved = 0, int ranks_sharing = 1) {
  const size_t rank = weight_bytes + packed_bytes;
  const size_t peers = peer_shares_bytes(weight_bytes, packed_bytes, ranks_sharing);
  return free >= rank && free - rank >= std::max(total / 4, reserved + peers);
}

// TESSERA_W4_PIN's "OUTxIN:CANDIDATE,..." as (out, in features) -> the
// index of the candidate a shape runs instead of the timing's choice: for
// measuring a candidate inside whole steps, where the loads of its neighbours
// and the memory they leave idle differ from its first call alone. A
// malformed entry is an Error(kInvalidArgument) naming it.
std::map<std::pair<int64_t, int64_t>, size_t> parse_w4_pins(const std::string& text);

class W4Linear {
 public:
  // Seconds per call of a candidate kernel (the backend's ColdTimer).
  using TimePerCall = std::function<double(const std::function<void()>& fn, int repeats)>;

  // kernel_capability: what the loaded kernel image runs as (tiles need 8.0);
  // device_capability: the GPU's own (the Hopper GEMM's sm_90a code runs on
  // 9.0 only). Reads TESSERA_W4_GEMV, TESSERA_W4_TILES, TESSERA_W4_STAGES,
  // TESSERA_W4_GROUP_SUMS, TESSERA_W4_WIDE, TESSERA_W4_PAIRS,
  // TESSERA_W4_NORMS, TESSERA_W4_SM90, TESSERA_W4_SM90_SPLITS and
  // TESSERA_W4_PIN (a candidate per shape instead of the timing's).
  W4Linear(cudaStream_t stream, Allocator& allocator, Gemm& gemm, DType compute_dtype, int kernel_capability,
           int device_capability, TimePerCall time_per_call);

  // Where the kernel image runs mma.sync on 16-bit activations (8.0 or
  // newer) and the shape allows, the weight is repacked on the device into the
  // tensor-core kernel's tiles (w4a16.h); otherwise the canonical layout, a
  // plain copy, is what the scalar GEMV reads. A weight of gate | up halves
  // gets paired tiles (w4a16.h) where its rows allow, so that a product can
  // store silu(gate) · up; TESSERA_W4_PAIRS=0 keeps the plain tiles. On a
  // 9.0 device whose build holds the Hopper GEMM (w4a16_sm90.h), a tiled
  // weight also gets that kernel's copy (QuantizedWeight::gemm_qweight ...),
  // rows in canonical order: twice the 4-bit bytes on the device, for
  // products of more rows than the tiles' kernels are fast at
  // (TESSERA_W4_SM90=0: no copy). Out of device memory once such copies
  // are made, the error's hint names TESSERA_W4_SM90=0.
  QuantizedWeight upload(const QuantizedWeight& host);

  // Before a model's upload (Backend::plan_quantized_copies): where the
  // Hopper copies would be made and second_copies_fit says no, none is made,
  // with a warning.
  void plan_copies(size_t weight_bytes, size_t packed_bytes);
  // Bytes a memory plan made before the upload needs free after it, and the
  // ranks loading onto this device (Backend::keep_free_after_weights);
  // plan_copies makes no copies that would take them.
  void keep_free_after_weights(size_t bytes, int ranks_sharing) {
    reserved_ = bytes;
    ranks_sharing_ = ranks_sharing;
  }
  // The device bytes of the Hopper copies uploaded so far.
  size_t copy_bytes() const { return copy_bytes_; }

  // Whether product(..., silu_mul = true) runs for this uploaded weight at
  // `rows` rows: paired tiles, a tensor-core kernel's rows.
  bool stores_silu_mul(const QuantizedWeight& w, int64_t rows) const {
    return w.backend_layout == kPairedTiles && rows <= kW4MmaMaxRows && gemv_mode_ != 0;
  }

  // Whether product(..., norms) runs for this uploaded weight at `rows`
  // rows: tiles, up to kW4NormRows rows, a tensor-core kernel's; off with
  // TESSERA_W4_NORMS=0.
  bool forms_norms(const QuantizedWeight& w, int64_t rows) const {
    return w.backend_layout != 0 && rows <= kW4NormRows && gemv_mode_ != 0 && norms_mode_ != 0 &&
           w.in_features % 16 == 0 && w.out_features % 16 == 0 && !(sm90_mode_ == 1 && w.gemm_qweight.defined());
  }

  // The 4-bit paths, each shape's first call timing the candidates on the real
  // operands and keeping the fastest: on tiled weights the tensor-core kernel's
  // pipelines and row warps (kKernels; up to kW4MmaMaxRows rows) and the
  // Hopper GEMM's token tiles and k splits (any rows, where the weight has
  // its copy; more than kW4MmaMaxRows rows are timed once for each power of
  // two) against dequantize + cuBLASLt; on canonical weights the scalar GEMV
  // (up to kW4GemvMaxRows rows; one row takes it untimed) against the same. Otherwise
  // dequantize into a scratch weight in the activation dtype and use cuBLASLt.
  // staging: uploads only, no kernels; capturing: the stream records a graph
  // (no timing there: a shape recorded has run before). silu_mul (where
  // stores_silu_mul): out [m, n / 2] = silu(gate) · up of the product, with
  // the bits of the product stored and then the SiLU·mul op. norms (where
  // forms_norms): an RMSNorm formed ahead or read (w4a16.h, W4Norms).
  void product(const Tensor& x, const QuantizedWeight& w, const Tensor& bias, Tensor& out, bool accumulate,
               bool staging, bool capturing, bool silu_mul = false, const W4Norms& norms = {});

 private:
  // QuantizedWeight::backend_layout of the uploads.
  static constexpr int kTiles = 1, kPairedTiles = 2;
  // rows (past kW4MmaMaxRows: the power of two at or above), out, in,
  // activation dtype, tiled, how the rows are stored (W4Store, + 4 reading a
  // norm formed ahead, + 8 forming one)
  using Key = std::tuple<int64_t, int64_t, int64_t, DType, bool, int>;

  // The tensor-core 4-bit kernels a shape's first call times: the
  // pipelines of launch_w4a16_mma by row warps, the group-sum kernels
  // (group_sums: an index of kW4GroupSumsKernels, -1 for the others) and the
  // wide-row kernels (two row tiles a warp: launch_w4a16_wide). The
  // shared-memory-stage kernels come last (kKernelsWithoutStages).
  struct Kernel {
    W4Pipeline pipeline;
    int row_warps;
    int group_sums;
  };
  static constexpr Kernel kKernels[] = {
      {W4Pipeline::kRegisterBatches, 1, -1}, {W4Pipeline::kRegisterBatches, 2, -1},
      {W4Pipeline::kRegisterBatches, 4, -1}, {W4Pipeline::kRegisterBatches, 8, -1},
      {W4Pipeline::kRegisterDouble, 1, -1},  {W4Pipeline::kRegisterDouble, 2, -1},
      {W4Pipeline::kGroupSums, 0, 0},        {W4Pipeline::kGroupSums, 0, 1},
      {W4Pipeline::kGroupSums, 0, 2},        {W4Pipeline::kWideRows, 1, -1},
      {W4Pipeline::kWideRows, 2, -1},        {W4Pipeline::kSharedStages, 1, -1},
      {W4Pipeline::kSharedStages, 2, -1},    {W4Pipeline::kSharedStages, 4, -1},
      {W4Pipeline::kSharedStages, 8, -1},
  };
  static constexpr size_t kKernelsWithoutStages = 11;

  // Tiles where the loaded kernel image has mma.sync for 16-bit operands.
  bool uses_tiles(const QuantizedWeight& w) const {
    if (tiles_mode_ == 0 || compute_dtype_ == DType::kF32) return false;
    if (!w4_tiles_supported(w.in_features, w.group_size)) return false;
    return kernel_capability_ >= 80;
  }
  // upload's work: the canonical copy, the Hopper GEMM's, the tiles.
  QuantizedWeight upload_layouts(const QuantizedWeight& host);
  // The Hopper GEMM's copy beside the tiles.
  bool uses_sm90(const QuantizedWeight& w) const {
    return sm90_mode_ != 0 && device_capability_ == 90 && uses_tiles(w) &&
           w4_sm90_supported(w.out_features, w.in_features, w.group_size);
  }

  // A workspace of at least `bytes` for the Hopper GEMM's split variants
  // (nullptr for none): the kept one, which every product shares (they run in
  // stream order), grown outside graph recording; one recorded graph's
  // products point at it, so no memory node or free is recorded. A shape
  // recorded past the kept size (none is: each shape runs before it is
  // recorded) takes `pooled` from the pool instead.
  void* sm90_workspace(size_t bytes, bool capturing, Tensor& pooled);

  // Index of the 4-bit candidate to run, of `count` (0 is dequantize +
  // cuBLASLt; `run(i)` runs candidate i). Each shape's first call times them
  // all (never while recording a graph: a shape recorded there has run
  // before) and remembers the fastest; untimed_kernel takes the first kernel
  // that applies as it is. TESSERA_W4_GEMV=1 times only the kernels that read
  // the packed weights (tests: a kernel wherever one applies), 0 takes
  // dequantize + cuBLASLt. `applies(i)`: candidate i runs this shape.
  template <typename Run, typename Applies>
  size_t choice(const Key& key, size_t count, bool untimed_kernel, bool capturing, const Run& run,
                const Applies& applies);


  cudaStream_t stream_;
  Allocator& allocator_;
  Gemm& gemm_;
  DType compute_dtype_;
  int kernel_capability_;
  int device_capability_;
  TimePerCall time_per_call_;
  int gemv_mode_ = -1;    // TESSERA_W4_GEMV: 1 a packed-weight kernel wherever one applies, 0 dequantize; -1 timed
  int tiles_mode_ = -1;   // TESSERA_W4_TILES=0: canonical layout and the scalar GEMV even where tiles apply
  int stages_mode_ = -1;  // TESSERA_W4_STAGES=0: no shared-memory-stage candidates (to compare against)
  int group_sums_mode_ = -1;  // TESSERA_W4_GROUP_SUMS=0: no group-sum candidates (to compare against)
  int wide_mode_ = -1;        // TESSERA_W4_WIDE=0: no wide-row candidates (to compare against)
  int pairs_mode_ = -1;       // TESSERA_W4_PAIRS=0: plain tiles for gate | up too (to compare against)
  int norms_mode_ = -1;       // TESSERA_W4_NORMS=0: no RMSNorm in the stores (to compare against)
  int sm90_mode_ = -1;        // TESSERA_W4_SM90: 0 no Hopper GEMM copy, 1 that GEMM wherever it applies (tests)
  int splits_mode_ = -1;      // TESSERA_W4_SM90_SPLITS=0: the Hopper GEMM's whole tiles only (to compare against)
  std::map<Key, size_t> choices_;  // per 4-bit shape: the candidate choice() picked
  std::map<std::pair<int64_t, int64_t>, size_t> pins_;  // TESSERA_W4_PIN: (out, in) -> candidate
  // The Hopper GEMM's workspaces, the last the largest and the one in use;
  // the ones it outgrew stay while graphs recorded before may point at them.
  std::vector<Tensor> sm90_workspaces_;
  bool logged_sm90_ = false;       // the Hopper copies announced
  size_t copy_bytes_ = 0;          // their bytes
  size_t reserved_ = 0;            // keep_free_after_weights
  int ranks_sharing_ = 1;          // keep_free_after_weights
};

}  // namespace tessera::backend::cuda
