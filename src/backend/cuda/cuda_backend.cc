// The CUDA backend: Backend's ops on one GPU and one stream, by the kernels in
// kernels.h and cuBLASLt. Step metadata (positions, block tables, the token ->
// sequence map) is uploaded once per forward in prepare(); RoPE frequencies
// only when they change. Nothing here synchronises but to_host_f32.
//
// Device graphs (backend.h): while the stream records, uploads are skipped
// (the kernels read what the forward before it uploaded: same shapes, same
// buffers); while staging, uploads happen and kernels are not launched. Every
// upload buffer only grows, and a growth bumps graph_generation_.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cold_timing.h"
#include "backend/cuda/cuda_allocator.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/dtype_dispatch.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/l2_prefetch.h"
#include "backend/cuda/prefill_kernel_choice.h"
#include "backend/cuda/prefill_sm90.h"
#include "backend/cuda/upload_buffers.h"
#include "backend/cuda/w4_linear.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::backend {

namespace {

using cuda::CudaAllocator;
using cuda::DeviceBuffer;
using cuda::DeviceVector;
using cuda::PinnedStaging;
using cuda::dispatch;
using cuda::Gemm;
using cuda::ptr;

// Most bytes of later weights a decode step warms L2 with (l2_prefetch.cuh),
// from TESSERA_L2_PREFETCH_MB: "auto" three quarters of the device's L2
// (room left for what the kernels between stream through it), a number that
// many MB; unset or 0, none. Off unless asked for: on an H100 it gained
// nothing (docs/BENCHMARKS.md); the H200 is not measured yet.
size_t l2_prefetch_budget(int index) {
  const char* setting = std::getenv("TESSERA_L2_PREFETCH_MB");
  if (setting == nullptr) return 0;
  if (std::string(setting) == "auto") {
    int l2 = 0;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, index));
    return static_cast<size_t>(l2) / 4 * 3;
  }
  char* end = nullptr;
  const double mb = std::strtod(setting, &end);
  if (end != setting && *end == '\0' && mb >= 0) return static_cast<size_t>(mb * 1024 * 1024);
  log_warning("TESSERA_L2_PREFETCH_MB={} is neither auto nor a number of MB: no L2 prefetch", setting);
  return 0;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int index, DType compute_dtype) : index_(index), compute_dtype_(compute_dtype) {
    auto owner = std::make_shared<cuda::StreamOwner>(index);
    stream_ = owner->stream();
    allocator_ = std::make_unique<CudaAllocator>(std::move(owner));
    cold_timer_ = std::make_unique<cuda::ColdTimer>(stream_, *allocator_, index);
    // The products' first-call timings, cold: as a decode step meets them (cold_timing.h).
    auto cold = [this](const std::function<void()>& fn, int repeats) {
      return cold_timer_->seconds_per_call(fn, repeats);
    };
    gemm_ = std::make_unique<Gemm>(stream_, *allocator_, cold);
    int count = 1;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, index));
    multiprocessors_ = count;
    l2_prefetch_bytes_ = l2_prefetch_budget(index);
    if (const char* mode = std::getenv("TESSERA_L2_PREFETCH_KERNEL")) l2_prefetch_kernel_ = std::string(mode) == "1";
    const CudaDeviceInfo info = cuda_device_info(index);
    kernel_capability_ = info.effective_capability();
    device_capability_ = info.device_capability();
    if (const char* kernel = std::getenv("TESSERA_DECODE_ATTENTION")) {
      use_split_decode_ = std::string(kernel) != "per_query";
    }
    if (const char* fused = std::getenv("TESSERA_FUSED_INPUT")) fuse_inputs_ = std::string(fused) != "0";
    if (const char* fused = std::getenv("TESSERA_FUSED_ROPE")) fuse_rope_ = std::string(fused) != "0";
    w4_ = std::make_unique<cuda::W4Linear>(stream_, *allocator_, *gemm_, compute_dtype_, kernel_capability_,
                                           device_capability_, cold);
  }

  ~CudaBackend() override {
    // Waits for queued work; the stream itself lives on in any buffer still held.
    cudaStreamSynchronize(stream_);
  }

  Device device() const override { return Device::cuda(index_); }

  void check_supported(const ModelRequirements& requirements) const override {
    static constexpr int64_t kHeadDims[] = {8, 16, 32, 64, 96, 128, 256};
    if (std::find(std::begin(kHeadDims), std::end(kHeadDims), requirements.head_dim) == std::end(kHeadDims)) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("cuda:{}: no attention kernel for head_dim {}", index_, requirements.head_dim),
                  "supported head dims: 8, 16, 32, 64, 96, 128, 256; run this model with --device cpu");
    }
    const CudaDeviceInfo info = cuda_device_info(index_);
    if (info.compute_major * 10 + info.compute_minor < 75) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("cuda:{} ({}) has compute capability {}.{}; tessera's kernels need 7.5 or newer", index_,
                              info.name, info.compute_major, info.compute_minor),
                  "use a newer GPU or --device cpu");
    }
    // What the loaded kernel image can run, not only what the GPU can (a PTX-only build).
    if (info.effective_capability() == 0) {
      throw Error(ErrorKind::kUnsupported, fmt::format("cuda:{} ({}): {}", index_, info.name, info.describe_image()),
                  fmt::format("rebuild with -DTESSERA_CUDA_ARCHS={}{} (or a list holding it)", info.compute_major,
                              info.compute_minor));
    }
    if (info.effective_capability() < 75) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("cuda:{} ({}): kernels loaded as {}; tessera's kernels need compute_75 or newer",
                              index_, info.name, info.describe_image()),
                  "rebuild with TESSERA_CUDA_ARCHS holding 75 or newer");
    }
    if (compute_dtype_ == DType::kBF16 && !info.supports_bf16()) {
      throw Error(ErrorKind::kUnsupported,
                  info.device_capability() >= 80
                      ? fmt::format("cuda:{} ({}): kernels loaded as {}; bf16 needs kernels built for 8.0 or newer",
                                    index_, info.name, info.describe_image())
                      : fmt::format("cuda:{} ({}) has no bfloat16 arithmetic", index_, info.name),
                  "use --dtype float16 (or auto, which picks it here)");
    }
  }
  Allocator& allocator() override { return *allocator_; }
  DType compute_dtype() const override { return compute_dtype_; }

  Tensor upload_weight(const Tensor& host) override {
    Tensor converted = host.dtype() == compute_dtype_ ? host : host.to_dtype(compute_dtype_);
    Tensor device = Tensor::empty(converted.shape(), compute_dtype_, *allocator_);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(device.raw_data(), converted.raw_data(), converted.nbytes(),
                                       cudaMemcpyHostToDevice, stream_));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `converted` may be freed on return
    return device;
  }

  Tensor to_host_f32(const Tensor& t) override {
    Tensor f32 = t;
    if (t.dtype() != DType::kF32) {
      f32 = Tensor::empty(t.shape(), DType::kF32, *allocator_);
      dispatch(t.dtype(), [&](auto tag) {
        using T = decltype(tag);
        cuda::launch_to_f32<T>(ptr<T>(t), t.numel(), ptr<float>(f32), stream_);
      });
    }
    Tensor host = Tensor::empty(t.shape(), DType::kF32);
    void* staging = pinned_.reserve(host.nbytes());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(staging, f32.raw_data(), host.nbytes(), cudaMemcpyDeviceToHost, stream_));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(host.raw_data(), staging, host.nbytes());
    return host;
  }

  void copy(const Tensor& src, Tensor& dst) override {
    TESSERA_CHECK(src.nbytes() == dst.nbytes() && src.contiguous() && dst.contiguous());
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDefault, stream_));
  }
  void synchronize() override { TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void* stream_handle() override { return stream_; }

  double time_per_call(const std::function<void()>& fn, int repeats) override {
    return cuda::seconds_per_call_back_to_back(stream_, fn, repeats);
  }

  void prepare(const AttentionBatch& batch) override {
    inv_freq_checked_ = nullptr;  // a new forward: its frequencies are compared again
    token_seq_host_.assign(batch.positions.size(), 0);
    for (int64_t s = 0; s < batch.num_seqs(); ++s) {
      for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) token_seq_host_[t] = static_cast<int32_t>(s);
    }
    // Query tiles for the prefill kernel: up to 64 consecutive new tokens of one sequence.
    constexpr int32_t kQueriesPerTile = 64;
    tile_seq_host_.clear();
    tile_first_host_.clear();
    tile_count_host_.clear();
    max_new_tokens_ = 0;
    decode_max_context_ = 0;
    for (int64_t s = 0; s < batch.num_seqs(); ++s) {
      const int32_t begin = batch.query_start[s], end = batch.query_start[s + 1];
      max_new_tokens_ = std::max(max_new_tokens_, end - begin);
      if (end > begin) {  // the key range of the sequence's last new token
        const int64_t context = int64_t{batch.positions[end - 1]} + 1;
        decode_max_context_ = std::max(decode_max_context_, batch.sliding_window > 0
                                                                 ? std::min(context, batch.sliding_window)
                                                                 : context);
      }
      for (int32_t first = begin; first < end; first += kQueriesPerTile) {
        tile_seq_host_.push_back(static_cast<int32_t>(s));
        tile_first_host_.push_back(first);
        tile_count_host_.push_back(std::min(kQueriesPerTile, end - first));
      }
    }
    tile_seq_ = upload(tile_seq_buffer_, tile_seq_host_);
    tile_first_ = upload(tile_first_buffer_, tile_first_host_);
    tile_count_ = upload(tile_count_buffer_, tile_count_host_);
    positions_ = upload(positions_buffer_, batch.positions);
    token_seq_ = upload(token_seq_buffer_, token_seq_host_);
    block_tables_ = upload(block_tables_buffer_, batch.block_tables);
    prepared_tokens_ = batch.num_tokens();
    sm90_plan_heads_ = 0;
  }

  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override {
    const int64_t vocab = table.dim(0);
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab) {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab));
      }
    }
    const int32_t* device_ids = upload(ids_buffer_, ids);
    if (staging_) return;
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_embedding<T>(ptr<T>(table), table.dim(1), device_ids, static_cast<int64_t>(ids.size()), ptr<T>(out),
                                stream_);
    });
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    if (staging_) return;
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_rms_norm<T>(ptr<T>(x), ptr<T>(weight), x.dim(0), x.dim(-1), eps, ptr<T>(out), stream_);
    });
  }

  void head_rms_norm(Tensor& qkv, int64_t num_heads, int64_t num_kv_heads, const Tensor& q_weight,
                     const Tensor& k_weight, float eps) override {
    if (staging_) return;
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_head_rms_norm<T>(ptr<T>(qkv), qkv.dim(0), num_heads, num_kv_heads, q_weight.dim(0),
                                    ptr<T>(q_weight), ptr<T>(k_weight), eps, stream_);
    });
  }

  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    if (staging_) return;
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_add_rms_norm<T>(ptr<T>(residual), ptr<T>(x), ptr<T>(weight), residual.dim(0), residual.dim(-1), eps,
                                   ptr<T>(out), stream_);
    });
  }

  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) override {
    product(x, weight, bias, out, false);
  }

  // out (=|+=) x · weightᵀ (+ bias).
  void product(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, bool accumulate) {
    if (weight.dim(1) != x.dim(1) || out.dim(0) != x.dim(0) || out.dim(1) != weight.dim(0)) {
      throw Error(ErrorKind::kInternal, fmt::format("cuda linear: {} · {}ᵀ does not fit {}", x.describe(),
                                                    weight.describe(), out.describe()));
    }
    if (staging_) return;
    gemm_->linear(x.raw_data(), weight.raw_data(), out.raw_data(), x.dim(0), weight.dim(0), x.dim(1), x.dtype(),
                  out.dtype(), accumulate);
    if (bias.defined()) {
      TESSERA_CHECK(out.dtype() == bias.dtype());
      dispatch(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        cuda::launch_add_bias<T>(ptr<T>(out), ptr<T>(bias), out.dim(0), out.dim(1), stream_);
      });
    }
  }

  // The frequencies on the device; a graph being recorded finds them there
  // (its shape ran before with the same ones). Every layer of a forward
  // passes the same vector, so it is compared with the uploaded one once a
  // prepared batch: compared at every layer, a 64-sequence step compared
  // 32 × 4,096 floats on the host while the device waited.
  void upload_inv_freq(const std::vector<float>& inv_freq) {
    if (inv_freq.data() == inv_freq_checked_ && inv_freq.size() == inv_freq_host_.size()) return;
    if (inv_freq != inv_freq_host_ && !capturing_) {
      inv_freq_host_ = inv_freq;
      inv_freq_ = upload(inv_freq_buffer_, inv_freq);
    }
    inv_freq_checked_ = inv_freq.data();
  }

  void rope_and_cache_write(Tensor& qkv, int64_t num_heads, const std::vector<float>& inv_freq, float attention_scaling,
                            const AttentionBatch& batch, PagedKvLayer& cache, int64_t block_size) override {
    expect_prepared(batch);
    upload_inv_freq(inv_freq);
    if (staging_) return;
    const bool quantized = cache.quantized();
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      // A quantized cache: rotated in place here, quantized into the cache by the next kernel.
      cuda::launch_rope_cache_write<T>(ptr<T>(qkv), positions_, token_seq_, inv_freq_, attention_scaling,
                                       block_tables_, batch.max_blocks_per_seq, batch.num_tokens(), num_heads,
                                       cache.keys.dim(1), cache.keys.dim(3), block_size,
                                       quantized ? nullptr : ptr<T>(cache.keys),
                                       quantized ? nullptr : ptr<T>(cache.values), stream_);
      if (quantized) {
        cuda::launch_quantized_cache_write<T>(ptr<T>(qkv), positions_, token_seq_, block_tables_,
                                              batch.max_blocks_per_seq, batch.num_tokens(), num_heads,
                                              cache.keys.dim(1), cache.keys.dim(3), block_size,
                                              quantized_layer(cache), stream_);
      }
    });
  }

  static cuda::QuantizedKvLayer quantized_layer(const PagedKvLayer& cache) {
    return {ptr<uint8_t>(cache.keys), ptr<uint8_t>(cache.values), ptr<float2>(cache.key_params),
            ptr<float2>(cache.value_params), cache.code_bits()};
  }

  // Steps of decode tokens only rotate inside the split-K kernel (one kernel
  // fewer a layer); others, and every step over a quantized cache, run the two ops.
  void rope_attention(Tensor& qkv, int64_t num_heads, const std::vector<float>& inv_freq, float attention_scaling,
                      const AttentionBatch& batch, PagedKvLayer& cache, int64_t block_size, Tensor& out) override {
    expect_prepared(batch);
    if (!fuse_rope_ || !split_decode_step(batch) || cache.quantized()) {
      return Backend::rope_attention(qkv, num_heads, inv_freq, attention_scaling, batch, cache, block_size, out);
    }
    upload_inv_freq(inv_freq);
    decode_attention(qkv, num_heads, batch, cache, block_size, out, cuda::DecodeRope{inv_freq_, attention_scaling});
  }

  static constexpr int32_t kTiledFrom = 2;  // new tokens of a sequence from which attention takes the tiled kernel
  bool split_decode_step(const AttentionBatch& batch) const {
    return max_new_tokens_ < kTiledFrom && use_split_decode_ && batch.num_tokens() == batch.num_seqs();
  }

  void paged_attention(const Tensor& qkv, int64_t num_heads, const AttentionBatch& batch, const PagedKvLayer& cache,
                       int64_t block_size, Tensor& out) override {
    expect_prepared(batch);
    if (cache.quantized()) return quantized_attention(qkv, num_heads, batch, cache, block_size, out);
    // A step of decode tokens only (one per sequence) takes the split-K kernel;
    // anything with a prefill chunk takes the tiled one.
    if (max_new_tokens_ >= kTiledFrom) {
      if (staging_) return;
      const int64_t kv_heads = cache.keys.dim(1), head_dim = cache.keys.dim(3);
      if (cuda::use_sm90_prefill(compute_dtype_, head_dim, batch.sliding_window, device_capability_)) {
        const cuda::Sm90PrefillDevicePlan& plan = sm90_plan(batch, num_heads);
        cuda::launch_prefill_attention_sm90(ptr<__nv_bfloat16>(qkv), plan, batch.num_tokens(), block_tables_,
                                            num_heads, kv_heads, head_dim, block_size, ptr<__nv_bfloat16>(cache.keys),
                                            ptr<__nv_bfloat16>(cache.values), ptr<__nv_bfloat16>(out), stream_);
        return;
      }
      dispatch(compute_dtype_, [&](auto tag) {
        using T = decltype(tag);
        cuda::launch_prefill_attention<T>(ptr<T>(qkv), positions_, tile_seq_, tile_first_, tile_count_,
                                          static_cast<int64_t>(tile_seq_host_.size()), block_tables_,
                                          batch.max_blocks_per_seq, num_heads, cache.keys.dim(1), cache.keys.dim(3),
                                          block_size, batch.sliding_window, ptr<T>(cache.keys), ptr<T>(cache.values),
                                          ptr<T>(out), stream_);
      });
      return;
    }
    if (split_decode_step(batch)) {
      decode_attention(qkv, num_heads, batch, cache, block_size, out, {});
      return;
    }
    if (staging_) return;
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_paged_attention<T>(ptr<T>(qkv), positions_, token_seq_, block_tables_, batch.max_blocks_per_seq,
                                      batch.num_tokens(), num_heads, cache.keys.dim(1), cache.keys.dim(3), block_size,
                                      batch.sliding_window, ptr<T>(cache.keys), ptr<T>(cache.values), ptr<T>(out),
                                      stream_);
    });
  }

  // Every product adds into the residual in its own store (cuBLASLt's beta =
  // 1, the GEMV's and the 4-bit kernels' epilogues): no step runs a separate
  // add. The 16-bit decode GEMV forms the input (RMSNorm, SiLU·mul) itself
  // where it is the shape's kernel (up to 16 rows): one kernel fewer, and
  // with the split-k variants, whose warps each form a quarter of x, faster
  // than the op and the plain GEMV (BENCHMARKS.md). Elsewhere, and with
  // TESSERA_FUSED_INPUT=0, the input is formed by its op into a scratch.
  void fused_linear(const Tensor& x, const LinearFusion& fusion, const Tensor& weight, const QuantizedWeight& packed,
                    const Tensor& bias, Tensor& out) override {
    const bool reads_norm_ahead = fusion.input == LinearFusion::Input::kRmsNormAhead;
    if ((reads_norm_ahead || fusion.norm_ahead.weight != nullptr) && !forms_norm_ahead(packed, x.dim(0))) {
      throw Error(ErrorKind::kInternal, "cuda fused_linear: no RMSNorm formed ahead for this product");
    }
    if (!fuse_inputs_ && fusion.input != LinearFusion::Input::kAsIs) {
      LinearFusion store_only;
      store_only.accumulate = fusion.accumulate;
      store_only.output = fusion.output;
      store_only.scratch = fusion.scratch;
      return fused_linear(formed_input(x, fusion), store_only, weight, packed, bias, out);
    }
    // A SiLU·mul store is the 4-bit kernels' (W4Linear::product checks the rest).
    const bool silu_mul_out = fusion.output == LinearFusion::Output::kSiluMul;
    if (silu_mul_out && !packed.defined()) {
      throw Error(ErrorKind::kInternal, "cuda fused_linear: no SiLU·mul store for a 16-bit product");
    }
    // The 4-bit kernels take the input as it is: forming it inside the
    // tensor-core kernels (in each row tile of the register kernels, or as
    // the group-sum kernels stage x in every block) measured slower than
    // the separate op (BENCHMARKS.md). An RMSNorm formed ahead costs them
    // no pass over x: the product before stored r ∘ g and r's sums of
    // squares, and this one scales its sums by 1 / rms in its store.
    if (packed.defined()) {
      cuda::W4Norms norms;
      if (reads_norm_ahead) {
        const Tensor* sums = fusion.norm_ahead.sums;
        TESSERA_CHECK(sums != nullptr && sums->dtype() == DType::kF32 && sums->numel() >= x.numel() / 16);
        norms.input_sums = ptr<float>(*sums);
        norms.eps = fusion.eps;
      }
      if (fusion.norm_ahead.weight != nullptr) {
        const LinearFusion::NormAhead& ahead = fusion.norm_ahead;
        TESSERA_CHECK(ahead.formed != nullptr && ahead.sums != nullptr && ahead.weight->dtype() == out.dtype() &&
                      ahead.weight->numel() == out.dim(1) && ahead.formed->dtype() == out.dtype() &&
                      ahead.formed->numel() >= out.numel() && ahead.sums->dtype() == DType::kF32 &&
                      ahead.sums->numel() >= out.numel() / 16);
        norms.ahead_weight = fusion.norm_ahead.weight->raw_data();
        norms.ahead_formed = fusion.norm_ahead.formed->raw_data();
        norms.ahead_sums = ptr<float>(*fusion.norm_ahead.sums);
      }
      quantized_product(reads_norm_ahead ? x : formed_input(x, fusion), packed, bias, out, fusion.accumulate,
                        silu_mul_out, norms);
      // Only decode-sized steps: a prefill's attention is no pause for the memory system.
      if (x.dim(0) <= cuda::kGemvMaxRows) prefetch_after_product(fusion);
      return;
    }
    const int64_t in = fusion.input == LinearFusion::Input::kSiluMul ? x.dim(1) / 2 : x.dim(1);
    const bool fusable = x.dtype() == compute_dtype_ && weight.dtype() == x.dtype() && weight.dim(1) == in &&
                         out.dim(0) == x.dim(0) && out.dim(1) == weight.dim(0) &&
                         (!bias.defined() || bias.dtype() == out.dtype()) &&
                         (fusion.input == LinearFusion::Input::kAsIs || out.dtype() == x.dtype());
    if (fusable && x.dim(0) <= cuda::kGemvMaxRows) {
      if (staging_) return;
      cuda::GemvFusion gemv;
      if (fusion.input == LinearFusion::Input::kSiluMul) gemv.input = cuda::FusedInput::kSiluMul;
      if (fusion.input == LinearFusion::Input::kRmsNorm) {
        TESSERA_CHECK(fusion.norm_weight != nullptr && fusion.norm_weight->dtype() == x.dtype());
        gemv.input = cuda::FusedInput::kRmsNorm;
        gemv.norm_weight = fusion.norm_weight->raw_data();
        gemv.eps = fusion.eps;
      }
      gemv.bias = bias.defined() ? bias.raw_data() : nullptr;
      gemv.accumulate = fusion.accumulate;
      if (!l2_prefetch_kernel_) gemv.prefetch = prefetch_ranges(fusion);
      if (gemm_->linear_fused(x.raw_data(), weight.raw_data(), out.raw_data(), x.dim(0), weight.dim(0), in, x.dtype(),
                              out.dtype(), gemv)) {
        if (l2_prefetch_kernel_) prefetch_after_product(fusion);
        return;
      }
    }
    product(formed_input(x, fusion), weight, bias, out, fusion.accumulate);
  }

  // A LinearFusion's prefetch weights, in order, cut to the L2 budget.
  cuda::PrefetchRanges prefetch_ranges(const LinearFusion& fusion) const {
    cuda::PrefetchRanges ranges;
    size_t left = l2_prefetch_bytes_;
    for (size_t i = 0; i < fusion.prefetch.size(); ++i) {
      const Tensor* weight = fusion.prefetch[i];
      if (weight == nullptr || !weight->defined() || weight->device() != device()) continue;
      const size_t bytes = std::min(weight->nbytes(), left) / 16 * 16;
      ranges.base[i] = static_cast<const char*>(weight->raw_data());
      ranges.bytes[i] = static_cast<int64_t>(bytes);
      left -= bytes;
    }
    return ranges;
  }

  // The prefetch as a kernel of its own, after a product whose kernel takes none.
  void prefetch_after_product(const LinearFusion& fusion) {
    const cuda::PrefetchRanges ranges = prefetch_ranges(fusion);
    if (staging_ || ranges.total() == 0) return;
    cuda::launch_prefetch_l2(ranges, static_cast<int>(multiprocessors_), stream_);
  }

  // x itself, or the separate op's rms_norm / silu_mul of it in the caller's
  // scratch (backend.h), else in input_scratch_ (one buffer, grown as needed:
  // the product that reads it is queued before the next input is formed).
  Tensor formed_input(const Tensor& x, const LinearFusion& fusion) {
    if (fusion.input == LinearFusion::Input::kAsIs) return x;
    const bool silu = fusion.input == LinearFusion::Input::kSiluMul;
    const Shape shape = {x.dim(0), silu ? x.dim(1) / 2 : x.dim(1)};
    const size_t bytes = dtype_bytes(x.dtype(), static_cast<size_t>(shape_numel(shape)));
    const bool caller_has_room = fusion.scratch != nullptr && fusion.scratch->nbytes() >= bytes;
    if (!caller_has_room && (!input_scratch_.defined() || input_scratch_.nbytes() < bytes)) {
      input_scratch_ = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kU8, *allocator_);
      ++graph_generation_;  // recorded graphs read the old buffer
    }
    Tensor formed(caller_has_room ? fusion.scratch->buffer() : input_scratch_.buffer(), 0, x.dtype(), shape);
    if (silu) {
      silu_mul(x, formed);
    } else {
      TESSERA_CHECK(fusion.norm_weight != nullptr);
      rms_norm(x, *fusion.norm_weight, fusion.eps, formed);
    }
    return formed;
  }

  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    if (staging_) return;
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_silu_mul<T>(ptr<T>(gate_up), gate_up.dim(0), gate_up.dim(1) / 2, ptr<T>(out), stream_);
    });
  }

  void add(Tensor& x, const Tensor& y) override {
    if (staging_) return;
    dispatch(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_add<T>(ptr<T>(x), ptr<T>(y), x.numel(), stream_);
    });
  }

  bool samples_rows() const override { return true; }

  std::vector<int32_t> sample_rows(Tensor& logits, const SamplingBatch& sampling) override {
    TESSERA_CHECK(logits.dtype() == DType::kF32 && logits.rank() == 2 && logits.contiguous());
    TESSERA_CHECK(!capturing_ && !staging_);
    const int64_t m = logits.dim(0), vocab = logits.dim(1);
    TESSERA_CHECK(static_cast<int64_t>(sampling.rows.size()) == m);
    for (const LogitEdit& e : sampling.edits) TESSERA_CHECK(e.row >= 0 && e.row < m && e.id >= 0 && e.id < vocab);
    std::vector<int32_t> ids(m);
    if (m == 0) return ids;
    const auto* rows = static_cast<const SamplingRow*>(
        upload_bytes(sampling_rows_, sampling.rows.data(), sampling.rows.size() * sizeof(SamplingRow)));
    if (!sampling.edits.empty()) {
      const auto* edits = static_cast<const LogitEdit*>(
          upload_bytes(logit_edits_, sampling.edits.data(), sampling.edits.size() * sizeof(LogitEdit)));
      cuda::launch_apply_logit_edits(ptr<float>(logits), vocab, edits, static_cast<int64_t>(sampling.edits.size()),
                                     stream_);
    }
    if (!sampling.allowed_rows.empty()) {
      // The forward is in flight: the host works out the sets meanwhile.
      std::vector<uint64_t> made;
      if (sampling.make_allowed) sampling.make_allowed(made);
      const std::vector<uint64_t>& bits = sampling.make_allowed ? made : sampling.allowed;
      const auto count = static_cast<int64_t>(sampling.allowed_rows.size());
      TESSERA_CHECK(static_cast<int64_t>(bits.size()) == count * ((vocab + 63) / 64));
      for (int32_t r : sampling.allowed_rows) TESSERA_CHECK(r >= 0 && r < m);
      const auto* allowed_rows = static_cast<const int32_t*>(
          upload_bytes(allowed_rows_, sampling.allowed_rows.data(), sampling.allowed_rows.size() * sizeof(int32_t)));
      const auto* allowed =
          static_cast<const uint64_t*>(upload_bytes(allowed_bits_, bits.data(), bits.size() * sizeof(uint64_t)));
      cuda::launch_apply_allowed(ptr<float>(logits), vocab, allowed_rows, allowed, count, stream_);
    }
    if (!sampled_ids_.defined() || sampled_ids_.numel() < m) sampled_ids_ = Tensor::empty({m}, DType::kI32, *allocator_);
    cuda::launch_sample_rows(ptr<float>(logits), m, vocab, rows, ptr<int32_t>(sampled_ids_), stream_);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(ids.data(), sampled_ids_.raw_data(), m * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                       stream_));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return ids;
  }

  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    for (int32_t r : rows) TESSERA_CHECK(r >= 0 && r < x.dim(0));
    const int32_t* device_rows = upload(rows_buffer_, rows);
    if (staging_) return;
    dispatch(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_gather_rows<T>(ptr<T>(x), device_rows, static_cast<int64_t>(rows.size()), x.dim(1), ptr<T>(out),
                                  stream_);
    });
  }

  bool supports_quantized_linear() const override { return true; }

  QuantizedWeight upload_quantized_weight(const QuantizedWeight& host) override { return w4_->upload(host); }
  void plan_quantized_copies(size_t weight_bytes, size_t packed_bytes) override {
    w4_->plan_copies(weight_bytes, packed_bytes);
  }
  size_t quantized_copy_bytes() const override { return w4_->copy_bytes(); }
  void keep_free_after_weights(size_t bytes, int ranks_sharing) override {
    w4_->keep_free_after_weights(bytes, ranks_sharing);
  }
  // Paired tiles of gate | up up to the tensor-core kernels' rows: SiLU·mul
  // in the product's store, one kernel fewer a decode layer.
  bool stores_silu_mul(const QuantizedWeight& packed, int64_t rows) const override {
    return w4_->stores_silu_mul(packed, rows);
  }

  // In the 4-bit kernels' stores (W4Linear::forms_norms), where inputs are fused at all.
  bool forms_norm_ahead(const QuantizedWeight& packed, int64_t rows) const override {
    return packed.defined() && fuse_inputs_ && w4_->forms_norms(packed, rows);
  }

  void linear_quantized(const Tensor& x, const QuantizedWeight& w, const Tensor& bias, Tensor& out) override {
    quantized_product(x, w, bias, out, false);
  }

  void quantized_product(const Tensor& x, const QuantizedWeight& w, const Tensor& bias, Tensor& out, bool accumulate,
                         bool silu_mul_out = false, const cuda::W4Norms& norms = {}) {
    w4_->product(x, w, bias, out, accumulate, staging_, capturing_, silu_mul_out, norms);
  }

  bool supports_graphs() const override { return true; }

  void begin_capture() override {
    TESSERA_CHECK(!capturing_ && !staging_);
    cuda::begin_stream_capture(stream_);
    capturing_ = true;
    graph_shapes_ = true;
    capture_generation_ = graph_generation_;
  }

  std::unique_ptr<DeviceGraph> end_capture() override {
    TESSERA_CHECK(capturing_);
    capturing_ = false;
    graph_shapes_ = false;
    std::unique_ptr<cuda::CudaGraph> graph = cuda::end_stream_capture(stream_);
    if (graph_generation_ != capture_generation_) {
      throw Error(ErrorKind::kInternal, "cuda backend: an input buffer moved while a graph was recorded");
    }
    return graph;
  }

  // Staging runs the forward of a recorded shape: the same split plan as the recording.
  void set_staging(bool staging) override {
    TESSERA_CHECK(!capturing_);
    staging_ = staging;
    graph_shapes_ = staging;
  }
  uint64_t graph_generation() const override { return graph_generation_; }

 private:
  // `bytes` of host memory into `buffer`, for kernels that run outside any
  // graph (a growth need not reset the graphs). A step's sampling rows seldom
  // change, and their copy would wait for the forward before it.
  const void* upload_bytes(DeviceBuffer& buffer, const void* data, size_t bytes) {
    uint64_t unread_generation = 0;
    return buffer.upload(data, bytes, *allocator_, stream_, unread_generation);
  }

  // Host values to the device buffer the kernels read; while a graph records,
  // the buffer already holds them (the same forward ran just before).
  template <typename V>
  const V* upload(DeviceVector<V>& buffer, const std::vector<V>& host) {
    if (capturing_) return buffer.current(host.size());
    return buffer.upload(host, *allocator_, stream_, graph_generation_);
  }

  // The FlashInfer kernel's work plan for this step, made and uploaded by its
  // first layer (every layer of a step has the same plan).
  const cuda::Sm90PrefillDevicePlan& sm90_plan(const AttentionBatch& batch, int64_t num_heads) {
    if (sm90_plan_heads_ != num_heads) {
      const cuda::Sm90PrefillPlan plan = cuda::plan_sm90_prefill(batch.query_start, batch.positions,
                                                                 batch.max_blocks_per_seq, num_heads, multiprocessors_);
      sm90_device_plan_ = cuda::sm90_device_plan(plan, upload(sm90_plan_buffer_, plan.packed()));
      sm90_plan_heads_ = num_heads;
    }
    return sm90_device_plan_;
  }

  // Over a quantized cache: decode steps by the split-K kernel (whatever
  // TESSERA_DECODE_ATTENTION says), the rest by the tiled kernels (tensor
  // cores where the dtype, head_dim and image allow, else the scalar one).
  void quantized_attention(const Tensor& qkv, int64_t num_heads, const AttentionBatch& batch, const PagedKvLayer& cache,
                      int64_t block_size, Tensor& out) {
    if (max_new_tokens_ < kTiledFrom && batch.num_tokens() == batch.num_seqs()) {
      return decode_attention(qkv, num_heads, batch, cache, block_size, out, {});
    }
    if (staging_) return;
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      cuda::launch_prefill_attention_quantized<T>(ptr<T>(qkv), positions_, tile_seq_, tile_first_, tile_count_,
                                                  static_cast<int64_t>(tile_seq_host_.size()), block_tables_,
                                                  batch.max_blocks_per_seq, num_heads, cache.keys.dim(1),
                                                  cache.keys.dim(3), block_size, batch.sliding_window,
                                                  quantized_layer(cache), ptr<T>(out), stream_);
    });
  }

  // A step of decode tokens only: split-K attention, GQA groups sharing K/V reads.
  void decode_attention(const Tensor& qkv, int64_t num_heads, const AttentionBatch& batch, const PagedKvLayer& cache,
                        int64_t block_size, Tensor& out, const cuda::DecodeRope& rope) {
    const int64_t seqs = batch.num_seqs(), kv_heads = cache.keys.dim(1), head_dim = cache.keys.dim(3);
    // A recorded graph serves every context its block tables can hold: plan for all of it.
    const int64_t context = graph_shapes_ ? int64_t{batch.max_blocks_per_seq} * block_size : decode_max_context_;
    const cuda::DecodeSplits splits = cuda::plan_decode_splits(seqs, num_heads, kv_heads, context, multiprocessors_);
    float* partial = nullptr;
    int32_t* arrivals = nullptr;
    if (splits.num_splits > 1) {
      const int64_t floats = seqs * num_heads * splits.num_splits * (head_dim + 1);
      if (!decode_partial_.defined() || decode_partial_.numel() < floats) {
        decode_partial_ = Tensor::empty({floats}, DType::kF32, *allocator_);
        ++graph_generation_;
      }
      const int64_t counters = cuda::decode_arrival_counters(seqs, num_heads, kv_heads);
      if (!decode_arrivals_.defined() || decode_arrivals_.numel() < counters) {
        decode_arrivals_ = Tensor::empty({counters}, DType::kI32, *allocator_);
        // Zero once: every launch leaves its counters zero again.
        TESSERA_CUDA_CHECK(cudaMemsetAsync(decode_arrivals_.raw_data(), 0, counters * sizeof(int32_t), stream_));
        ++graph_generation_;
      }
      partial = ptr<float>(decode_partial_);
      arrivals = ptr<int32_t>(decode_arrivals_);
    }
    if (staging_) return;  // the buffers are sized: a recording that follows finds them in place
    dispatch(compute_dtype_, [&](auto tag) {
      using T = decltype(tag);
      if (cache.quantized()) {
        cuda::launch_decode_attention_quantized<T>(ptr<T>(qkv), positions_, block_tables_,
                                                   batch.max_blocks_per_seq, seqs, num_heads, kv_heads, head_dim,
                                                   block_size, batch.sliding_window, splits, quantized_layer(cache),
                                                   partial, arrivals, ptr<T>(out), stream_);
        return;
      }
      cuda::launch_decode_attention<T>(ptr<T>(qkv), positions_, block_tables_, batch.max_blocks_per_seq, seqs,
                                       num_heads, kv_heads, head_dim, block_size, batch.sliding_window, splits,
                                       ptr<T>(cache.keys), ptr<T>(cache.values), partial, arrivals, ptr<T>(out),
                                       stream_, rope);
    });
  }

  void expect_prepared(const AttentionBatch& batch) const {
    if (prepared_tokens_ != batch.num_tokens()) {
      throw Error(ErrorKind::kInternal, "cuda backend: prepare(batch) was not called before the attention ops");
    }
  }

  int index_;
  DType compute_dtype_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaAllocator> allocator_;
  std::unique_ptr<Gemm> gemm_;

  DeviceVector<int32_t> tile_seq_buffer_, tile_first_buffer_, tile_count_buffer_;
  DeviceVector<int32_t> sm90_plan_buffer_;
  cuda::Sm90PrefillDevicePlan sm90_device_plan_;
  int64_t sm90_plan_heads_ = 0;  // 0: no plan for the prepared step yet
  std::vector<int32_t> tile_seq_host_, tile_first_host_, tile_count_host_;
  const int32_t* tile_seq_ = nullptr;
  const int32_t* tile_first_ = nullptr;
  const int32_t* tile_count_ = nullptr;
  int32_t max_new_tokens_ = 0;
  DeviceVector<int32_t> positions_buffer_, token_seq_buffer_, block_tables_buffer_, ids_buffer_, rows_buffer_;
  DeviceVector<float> inv_freq_buffer_;
  std::vector<int32_t> token_seq_host_;
  std::vector<float> inv_freq_host_;
  const float* inv_freq_checked_ = nullptr;  // the vector compared since the last prepare()
  const int32_t* positions_ = nullptr;
  const int32_t* token_seq_ = nullptr;
  const int32_t* block_tables_ = nullptr;
  const float* inv_freq_ = nullptr;
  int64_t prepared_tokens_ = -1;
  int64_t decode_max_context_ = 0;     // longest key range of the step's last tokens
  int64_t multiprocessors_ = 1;
  size_t l2_prefetch_bytes_ = 0;
  // TESSERA_L2_PREFETCH_KERNEL=1: the 16-bit GEMVs' prefetch by its own kernel too (a measurement switch).
  bool l2_prefetch_kernel_ = false;
  bool use_split_decode_ = true;       // TESSERA_DECODE_ATTENTION=per_query: the per-query kernel
  Tensor sampled_ids_;                 // [rows] i32: sampled ids before their copy to the host
  DeviceBuffer sampling_rows_, logit_edits_;  // a step's SamplingRows and LogitEdits (never read by graphs)
  DeviceBuffer allowed_rows_, allowed_bits_;  // and its structured outputs' allowed ids
  PinnedStaging pinned_;               // to_host_f32's landing place
  int device_capability_ = 0;  // the GPU's own (CudaDeviceInfo::device_capability)
  int kernel_capability_ = 0;  // what the loaded kernel image runs as (CudaDeviceInfo::effective_capability)
  Tensor input_scratch_;     // formed_input's buffer
  bool fuse_inputs_ = true;  // TESSERA_FUSED_INPUT=0: norms and SiLU·mul by their ops, never in the GEMV
  bool fuse_rope_ = true;    // TESSERA_FUSED_ROPE=0: decode steps' RoPE by its own kernel (comparisons)
  std::unique_ptr<cuda::ColdTimer> cold_timer_;  // the first-call timings of gemm_ and w4_
  std::unique_ptr<cuda::W4Linear> w4_;  // the 4-bit linears
  Tensor decode_partial_;              // [seqs, heads, splits, head_dim + 1] f32, grown as needed
  Tensor decode_arrivals_;             // decode attention's arrival counters (int32, zero between launches)
  bool capturing_ = false;             // the stream records a graph: no uploads
  bool staging_ = false;               // uploads only, no kernels (before a replay)
  bool graph_shapes_ = false;          // recording or staging: plan as graphs do
  uint64_t graph_generation_ = 0;      // bumped whenever a buffer kernels read moves
  uint64_t capture_generation_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int index, DType compute_dtype) {
  const int count = cuda_device_count();
  if (index < 0 || index >= count) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cuda:{} does not exist: {} CUDA device(s) visible", index, count),
                count == 0 ? "no GPU is visible; check the driver with nvidia-smi, or use --device cpu"
                           : fmt::format("use cuda:0 .. cuda:{}", count - 1));
  }
  return std::make_unique<CudaBackend>(index, compute_dtype);
}

bool flashinfer_prefill_built() { return cuda::sm90_prefill_built(); }

}  // namespace tessera::backend
