#include "backend/cuda/w4_linear.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dtype_dispatch.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::backend::cuda {
namespace {

// The Hopper GEMM's candidates, after the tiles' kernels: each token tile
// with each split, tile-major.
constexpr size_t kSm90Candidates = std::size(kW4Sm90TokenTiles) * std::size(kW4Sm90Splits);
W4Sm90Variant sm90_variant(size_t index) {
  return {kW4Sm90TokenTiles[index / std::size(kW4Sm90Splits)], kW4Sm90Splits[index % std::size(kW4Sm90Splits)]};
}

}  // namespace

std::map<std::pair<int64_t, int64_t>, size_t> parse_w4_pins(const std::string& text) {
  std::map<std::pair<int64_t, int64_t>, size_t> pins;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, end - start);
    long long n = 0, k = 0;
    unsigned long long candidate = 0;
    char tail = 0;
    if (std::sscanf(entry.c_str(), "%lldx%lld:%llu%c", &n, &k, &candidate, &tail) != 3 || n <= 0 || k <= 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  "TESSERA_W4_PIN: \"" + entry + "\" is not OUTxIN:CANDIDATE (e.g. 4096x4096:12)");
    }
    pins[{n, k}] = static_cast<size_t>(candidate);
    start = end + 1;
  }
  return pins;
}

W4Linear::W4Linear(cudaStream_t stream, Allocator& allocator, Gemm& gemm, DType compute_dtype, int kernel_capability,
                   int device_capability, TimePerCall time_per_call)
    : stream_(stream),
      allocator_(allocator),
      gemm_(gemm),
      compute_dtype_(compute_dtype),
      kernel_capability_(kernel_capability),
      device_capability_(device_capability),
      time_per_call_(std::move(time_per_call)) {
  if (const char* w4 = std::getenv("TESSERA_W4_GEMV")) gemv_mode_ = std::string(w4) == "1" ? 1 : 0;
  if (const char* tiles = std::getenv("TESSERA_W4_TILES")) tiles_mode_ = std::string(tiles) == "0" ? 0 : 1;
  if (const char* stages = std::getenv("TESSERA_W4_STAGES")) stages_mode_ = std::string(stages) == "0" ? 0 : 1;
  if (const char* sums = std::getenv("TESSERA_W4_GROUP_SUMS")) group_sums_mode_ = std::string(sums) == "0" ? 0 : 1;
  if (const char* wide = std::getenv("TESSERA_W4_WIDE")) wide_mode_ = std::string(wide) == "0" ? 0 : 1;
  if (const char* pairs = std::getenv("TESSERA_W4_PAIRS")) pairs_mode_ = std::string(pairs) == "0" ? 0 : 1;
  if (const char* norms = std::getenv("TESSERA_W4_NORMS")) norms_mode_ = std::string(norms) == "0" ? 0 : 1;
  if (const char* splits = std::getenv("TESSERA_W4_SM90_SPLITS")) splits_mode_ = std::string(splits) == "0" ? 0 : 1;
  if (const char* sm90 = std::getenv("TESSERA_W4_SM90")) {
    sm90_mode_ = std::string(sm90) == "0" ? 0 : std::string(sm90) == "1" ? 1 : -1;
  }
  if (const char* pins = std::getenv("TESSERA_W4_PIN")) pins_ = parse_w4_pins(pins);
}

template <typename Run, typename Applies>
size_t W4Linear::choice(const Key& key, size_t count, bool untimed_kernel, bool capturing, const Run& run,
                        const Applies& applies) {
  if (count == 1 || gemv_mode_ == 0) return 0;
  auto it = choices_.find(key);
  if (it != choices_.end()) return it->second;
  size_t first_kernel = 0;  // none applies: dequantize + cuBLASLt
  for (size_t i = 1; i < count && first_kernel == 0; ++i) {
    if (applies(i)) first_kernel = i;
  }
  if (capturing || untimed_kernel || first_kernel == 0) return first_kernel;
  if (auto pin = pins_.find({std::get<1>(key), std::get<2>(key)}); pin != pins_.end() && pin->second < count &&
                                                                    applies(pin->second)) {
    log_debug("linear_quantized m={} n={} k={}: #{} pinned by TESSERA_W4_PIN", std::get<0>(key), std::get<1>(key),
              std::get<2>(key), pin->second);
    return choices_[key] = pin->second;
  }
  size_t best = gemv_mode_ == 1 ? first_kernel : 0;
  double best_s = 1e30;
  std::string timings;
  for (size_t i = best; i < count; ++i) {
    if (!applies(i)) {
      timings += " -";
      continue;
    }
    const double s = time_per_call_([&] { run(i); }, 3);
    timings += fmt::format(" {:.1f}", s * 1e6);
    if (s < best_s) best = i, best_s = s;
  }
  const int stored = std::get<5>(key);
  log_debug("linear_quantized m={} n={} k={}{}{}{}{}: µs (dequantize + cublaslt, kernels){}: #{}", std::get<0>(key),
            std::get<1>(key), std::get<2>(key), std::get<4>(key) ? " tiled" : "",
            stored % 4 == static_cast<int>(W4Store::kSiluMul) ? " silu_mul" : "", stored & 4 ? " norm_read" : "",
            stored & 8 ? " norm_ahead" : "", timings, best);
  return choices_[key] = best;
}

void W4Linear::plan_copies(size_t weight_bytes, size_t packed_bytes) {
  if (sm90_mode_ == 0 || device_capability_ != 90 || !w4_sm90_built() || packed_bytes == 0) return;
  size_t free = 0, total = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (second_copies_fit(free, total, weight_bytes, packed_bytes, reserved_, ranks_sharing_)) return;
  sm90_mode_ = 0;
  const double gib = double(1ull << 30);
  const size_t peers = peer_shares_bytes(weight_bytes, packed_bytes, ranks_sharing_);
  const std::string kept =
      reserved_ + peers > total / 4
          ? fmt::format("the {:.1f} GiB the memory plan gave the KV cache and the steps{}", reserved_ / gib,
                        peers > 0 ? fmt::format(" and {:.1f} GiB for the {} other ranks' weights on this GPU",
                                                peers / gib, ranks_sharing_ - 1)
                                  : std::string())
          : fmt::format("a quarter of the {:.1f} GiB for the KV cache", total / gib);
  log_warning("4-bit weights: one copy on this GPU, none for the Hopper GEMM (batches of many rows take "
              "dequantize + cuBLASLt): the weights take {:.1f} GiB and a second copy {:.1f} GiB more, of {:.1f} GiB "
              "free, which would leave less than {}",
              weight_bytes / gib, packed_bytes / gib, free / gib, kept);
}

void* W4Linear::sm90_workspace(size_t bytes, bool capturing, Tensor& pooled) {
  if (bytes == 0) return nullptr;
  if (!sm90_workspaces_.empty() && static_cast<size_t>(sm90_workspaces_.back().nbytes()) >= bytes) {
    return sm90_workspaces_.back().raw_data();
  }
  const auto size = static_cast<int64_t>(std::bit_ceil(bytes));
  if (capturing) {  // an allocation here would belong to the graph
    pooled = Tensor::empty({size}, DType::kU8, allocator_);
    return pooled.raw_data();
  }
  sm90_workspaces_.push_back(Tensor::empty({size}, DType::kU8, allocator_));
  return sm90_workspaces_.back().raw_data();
}

QuantizedWeight W4Linear::upload(const QuantizedWeight& host) {
  try {
    return upload_layouts(host);
  } catch (const Error& e) {
    // The memory check before a load counts one copy of the 4-bit weights.
    if (e.kind() != ErrorKind::kOutOfMemory || !logged_sm90_) throw;
    throw Error(ErrorKind::kOutOfMemory, e.message(),
                "every 4-bit linear is also kept in the Hopper GEMM's layout on this GPU: TESSERA_W4_SM90=0 keeps "
                "one copy" + (e.hint().empty() ? std::string() : "; or " + e.hint()));
  }
}

QuantizedWeight W4Linear::upload_layouts(const QuantizedWeight& host) {
  check_quantized_weight(host, "upload_quantized_weight");
  auto copy_up = [&](const Tensor& t) {
    Tensor device = Tensor::empty(t.shape(), t.dtype(), allocator_);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(device.raw_data(), t.raw_data(), t.nbytes(), cudaMemcpyHostToDevice, stream_));
    return device;
  };
  QuantizedWeight device = host;
  device.qweight = copy_up(host.qweight);
  device.scales = copy_up(host.scales);
  device.zeros = copy_up(host.zeros);
  if (uses_sm90(host)) {
    const int64_t n = host.out_features, k = host.in_features, g = host.group_size;
    if (!logged_sm90_) {
      log_info("4-bit weights: a second copy for the Hopper GEMM (batches of many rows, prefill); "
               "TESSERA_W4_SM90=0 keeps one copy");
      logged_sm90_ = true;
    }
    device.gemm_qweight = Tensor::empty({n * k / 2}, DType::kU8, allocator_);
    device.gemm_scales = Tensor::empty({k / g, n}, compute_dtype_, allocator_);
    device.gemm_zeros = Tensor::empty({k / g, n}, compute_dtype_, allocator_);
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, float>) {
        launch_w4_sm90_pack<T>(static_cast<const uint32_t*>(device.qweight.raw_data()),
                               static_cast<const __half*>(device.scales.raw_data()),
                               static_cast<const uint8_t*>(device.zeros.raw_data()), n, k, g,
                               static_cast<uint8_t*>(device.gemm_qweight.raw_data()), ptr<T>(device.gemm_scales),
                               ptr<T>(device.gemm_zeros), stream_);
      }
    });
    copy_bytes_ += static_cast<size_t>(device.gemm_qweight.nbytes() + device.gemm_scales.nbytes() +
                                       device.gemm_zeros.nbytes());
  }
  if (uses_tiles(host)) {
    const int64_t n = host.out_features, k = host.in_features, g = host.group_size;
    const bool paired = host.gate_up_halves && w4_pairs_supported(n) && pairs_mode_ != 0;
    Tensor tiles = Tensor::empty({w4_tile_words(n, k)}, DType::kI32, allocator_);
    Tensor scale_zero = Tensor::empty({w4_scale_zero_words(n, k, g)}, DType::kI32, allocator_);
    launch_w4_tile(static_cast<const uint32_t*>(device.qweight.raw_data()),
                   static_cast<const __half*>(device.scales.raw_data()),
                   static_cast<const uint8_t*>(device.zeros.raw_data()), n, k, g,
                   static_cast<uint32_t*>(tiles.raw_data()), static_cast<uint32_t*>(scale_zero.raw_data()), stream_,
                   paired);
    device.qweight = std::move(tiles);
    device.scales = std::move(scale_zero);
    device.zeros = Tensor();
    device.backend_layout = paired ? kPairedTiles : kTiles;
  }
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host parts may be freed on return
  return device;
}

// out (=|+=) x · dequantize(w)ᵀ (+ bias), or silu(gate) · up of it.
void W4Linear::product(const Tensor& x, const QuantizedWeight& w, const Tensor& bias, Tensor& out, bool accumulate,
                       bool staging, bool capturing, bool silu_mul, const W4Norms& norms) {
  const int64_t m = x.dim(0), n = w.out_features, k = w.in_features;
  if (x.dim(1) != k || out.dim(0) != m || out.dim(1) != (silu_mul ? n / 2 : n) || out.dtype() != x.dtype() ||
      reinterpret_cast<uintptr_t>(x.raw_data()) % 16 != 0) {
    throw Error(ErrorKind::kInternal, fmt::format("cuda linear_quantized: {} · [{}, {}]ᵀ (4-bit{}) does not fit {}",
                                                  x.describe(), n, k, silu_mul ? ", SiLU·mul" : "", out.describe()));
  }
  if (silu_mul && (!stores_silu_mul(w, m) || accumulate)) {
    throw Error(ErrorKind::kInternal, fmt::format("cuda linear_quantized: no SiLU·mul store for this weight at {} "
                                                  "rows{}", m, accumulate ? " (or into a sum)" : ""));
  }
  const bool with_norms = norms.input_sums != nullptr || norms.ahead_sums != nullptr;
  if (with_norms && !forms_norms(w, m)) {
    throw Error(ErrorKind::kInternal, fmt::format("cuda linear_quantized: no RMSNorm in the store for this weight "
                                                  "at {} rows", m));
  }
  const bool paired = w.backend_layout == kPairedTiles;
  const W4Store store = silu_mul ? W4Store::kSiluMul : paired ? W4Store::kPairedRows : W4Store::kRows;
  const int stored = static_cast<int>(store) + (norms.input_sums ? 4 : 0) + (norms.ahead_sums ? 8 : 0);
  if (staging) return;
  const auto* qweight = static_cast<const uint32_t*>(w.qweight.raw_data());
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* bias_ptr = bias.defined() ? ptr<T>(bias) : nullptr;
    // Candidates are timed into a scratch output (`out` may be the residual
    // they add to), if it fits one that needs no allocation (gemm.h); one
    // forming a norm ahead adds into it, whatever it holds, as its store
    // must (the formed input and sums it leaves are rewritten by the real call).
    Tensor scratch;
    const bool add_when_timed = norms.ahead_sums != nullptr;
    auto timed = [&](const auto& run) {
      return [&](size_t candidate) {
        T* target = static_cast<T*>(gemm_.timing_output(out.nbytes()));
        if (target == nullptr) {
          if (!scratch.defined()) scratch = Tensor::empty(out.shape(), out.dtype(), allocator_);
          target = ptr<T>(scratch);
        }
        run(candidate, target, add_when_timed);
      };
    };
    auto dequantize_gemm = [&](auto dequantize, T* target, bool add) {
      Tensor dense = Tensor::empty({n, k}, x.dtype(), allocator_);  // stream-ordered: reused by the pool
      dequantize(ptr<T>(dense));
      gemm_.linear(x.raw_data(), dense.raw_data(), target, m, n, k, x.dtype(), out.dtype(), add);
      if (bias.defined()) launch_add_bias<T>(target, bias_ptr, m, n, stream_);
    };
    if (w.backend_layout) {
      if constexpr (std::is_same_v<T, float>) {
        throw Error(ErrorKind::kInternal, "cuda linear_quantized: tiled 4-bit weights with f32 activations");
      } else {
        // Candidate 0: dequantize + cuBLASLt; then the kernel's pipelines and row warps
        // (kKernels; the shared-memory stages last, left out with TESSERA_W4_STAGES=0;
        // the group-sum and wide-row kernels where they apply, left out with
        // TESSERA_W4_GROUP_SUMS=0 and TESSERA_W4_WIDE=0).
        // Then the Hopper GEMM's token tiles, each with its tiles whole, by
        // stream-K and with k split in parts, where the weight has its copy
        // (w4a16_sm90.h; rows in canonical order, so a SiLU·mul store goes
        // through a product of its own and the op).
        const auto* scale_zero = static_cast<const uint32_t*>(w.scales.raw_data());
        const size_t first_sm90 = 1 + std::size(kKernels);
        const bool sm90 = w.gemm_qweight.defined();
        auto run_sm90 = [&](W4Sm90Variant variant, T* target, bool add) {
          const size_t workspace_bytes = w4a16_sm90_workspace_bytes<T>(m, n, k, w.group_size, variant);
          Tensor pooled;  // only where a graph records a shape the kept workspace is too small for
          void* workspace = sm90_workspace(workspace_bytes, capturing, pooled);
          auto gemm = [&](T* into, bool add_into) {
            launch_w4a16_sm90<T>(ptr<T>(x), static_cast<const uint8_t*>(w.gemm_qweight.raw_data()),
                                 ptr<T>(w.gemm_scales), ptr<T>(w.gemm_zeros), m, n, k, w.group_size, variant,
                                 workspace, workspace_bytes, into, stream_, add_into);
            if (bias.defined()) launch_add_bias<T>(into, bias_ptr, m, n, stream_);
          };
          if (!silu_mul) return gemm(target, add);
          Tensor gate_up = Tensor::empty({m, n}, x.dtype(), allocator_);  // stream-ordered: reused by the pool
          gemm(ptr<T>(gate_up), false);
          launch_silu_mul<T>(ptr<T>(gate_up), m, n / 2, target, stream_);
        };
        auto run = [&](size_t candidate, T* target, bool add) {
          if (candidate == 0) {
            return dequantize_gemm([&](T* dense) {
              launch_w4_dequantize_tiles<T>(qweight, scale_zero, n, k, w.group_size, dense, stream_, paired);
            }, target, add);
          }
          if (candidate >= first_sm90) return run_sm90(sm90_variant(candidate - first_sm90), target, add);
          const Kernel& kernel = kKernels[candidate - 1];
          if (kernel.pipeline == W4Pipeline::kGroupSums) {
            return launch_w4a16_group_sums<T>(ptr<T>(x), qweight, scale_zero, bias_ptr, m, n, k, w.group_size,
                                              kernel.group_sums, target, stream_, add, store, norms);
          }
          if (kernel.pipeline == W4Pipeline::kWideRows) {
            return launch_w4a16_wide<T>(ptr<T>(x), qweight, scale_zero, bias_ptr, m, n, k, w.group_size,
                                        kernel.row_warps, target, stream_, add, store, norms);
          }
          launch_w4a16_mma<T>(ptr<T>(x), qweight, scale_zero, bias_ptr, m, n, k, w.group_size, kernel.row_warps,
                              kernel.pipeline, target, stream_, add, store, norms);
        };
        const size_t candidates = first_sm90 + (sm90 ? kSm90Candidates : 0);
        auto applies = [&](size_t candidate) {
          const bool only_sm90 = sm90 && sm90_mode_ == 1;
          if (candidate == 0) return !silu_mul && !with_norms && !only_sm90;  // a dense product stores neither
          if (candidate >= first_sm90) {
            return !with_norms && (sm90_variant(candidate - first_sm90).splits == kW4Sm90WholeTiles ||
                                   splits_mode_ != 0);
          }
          if (m > kW4MmaMaxRows || only_sm90) return false;
          if (candidate - 1 >= kKernelsWithoutStages && stages_mode_ == 0) return false;
          if (candidate == 1) return true;
          const Kernel& kernel = kKernels[candidate - 1];
          if (kernel.pipeline == W4Pipeline::kGroupSums) {
            return group_sums_mode_ != 0 && w4_group_sums_supported(m, k, w.group_size);
          }
          if (kernel.pipeline == W4Pipeline::kWideRows) {
            return wide_mode_ != 0 && w4_wide_supported(m, kernel.row_warps);
          }
          return true;
        };
        int64_t rows = m;  // past the tiles' kernels, one timing for each power of two
        if (rows > kW4MmaMaxRows) rows = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(rows)));
        run(choice({rows, n, k, x.dtype(), true, stored}, candidates, false, capturing, timed(run), applies),
            ptr<T>(out), accumulate);
      }
    } else {
      // Candidate 0: dequantize + cuBLASLt; 1: the scalar GEMV.
      const auto* scales = static_cast<const __half*>(w.scales.raw_data());
      const auto* zeros = static_cast<const uint8_t*>(w.zeros.raw_data());
      auto run = [&](size_t candidate, T* target, bool add) {
        if (candidate == 0) {
          return dequantize_gemm([&](T* dense) {
            launch_w4_dequantize<T>(qweight, scales, zeros, n, k, w.group_size, dense, stream_);
          }, target, add);
        }
        launch_w4a16_gemv<T>(ptr<T>(x), qweight, scales, zeros, bias_ptr, m, n, k, w.group_size, target, stream_,
                             add);
      };
      run(choice({m, n, k, x.dtype(), false, static_cast<int>(W4Store::kRows)}, m <= kW4GemvMaxRows ? 2 : 1, m == 1,
                 capturing, timed(run),
                 [](size_t) { return true; }),
          ptr<T>(out), accumulate);
    }
  });
}

}  // namespace tessera::backend::cuda
