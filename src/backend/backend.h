// Backend: the operations a transformer forward needs, on one device.
//
// Each op has a plain reference implementation in cpu/ (the judge) and, later,
// a fast twin in cuda/ with the same contract. Activations are row-major; the
// compute dtype of the CPU backend is f32. Ops never know which model they
// serve: they see tensors and plain parameters.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/paged_kv.h"
#include "backend/quantized_weight.h"
#include "backend/row_sampling.h"
#include "core/buffer.h"
#include "core/tensor.h"

namespace tessera::backend {

// What a model needs of a backend's kernels, checked before any weight is read.
struct ModelRequirements {
  int64_t head_dim = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
};

// A recorded sequence of a backend's ops (a CUDA graph) that runs again on
// the same device buffers, reading whatever they hold at replay.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Queues the recorded ops on the backend's stream (not waited for).
  virtual void replay() = 0;
};

// What a linear layer's input is made of, and where its result goes; a
// backend fuses these into the product where it can (the CUDA decode GEMV),
// each saving a step one kernel, and otherwise runs the separate ops:
//   input kAsIs     x                                 x [n, in]
//         kRmsNorm  rms_norm(x, *norm_weight, eps)    x [n, in], norm_weight [in]
//         kSiluMul  silu(gate) * up                   x [n, 2 * in] as gate | up
//         kRmsNormAhead                               x [n, in] = r ∘ g, formed by the
//                   product before it (norm_ahead below), which left r's sums
//                   of squares in norm_ahead.sums: rms_norm(r, g, eps) up to rounding
//   accumulate      out += the result (out: the residual stream), else out =
//   scratch         where a backend that runs the input's op separately may
//                   put its [n, in] result (its buffer is used, any shape of
//                   at least that many bytes), so a forward allocates its
//                   buffers up front: ranks sharing a GPU must not allocate
//                   between their collectives. Null: the backend finds room.
struct LinearFusion {
  enum class Input { kAsIs, kRmsNorm, kSiluMul, kRmsNormAhead };
  Input input = Input::kAsIs;
  const Tensor* norm_weight = nullptr;
  float eps = 0.0f;
  bool accumulate = false;
  // What the product stores: its rows, or (kSiluMul, only where
  // Backend::stores_silu_mul says so, never with accumulate) silu(gate) · up
  // of its gate | up halves, out [n, out_features / 2].
  enum class Output { kAsIs, kSiluMul };
  Output output = Output::kAsIs;
  const Tensor* scratch = nullptr;
  // The weights the forward reads after the ops that follow this product, in
  // the order it reads them, when those ops read little memory (decode
  // attention after the qkv projection): a backend may start moving as much
  // of them as its cache holds while those ops run. A hint; no result
  // depends on it.
  std::array<const Tensor*, 2> prefetch{};
  // An RMSNorm formed across two products, where Backend::forms_norm_ahead
  // allows (a decode step's 4-bit products on CUDA), so that no norm op runs
  // between them: the product that adds a layer's output into the residual
  // stream r (accumulate) also stores the next norm's input r ∘ weight into
  // `formed` [n, hidden] and r's sums of squares into `sums` (f32 [n, hidden
  // / 16], partial sums over 16 rows each); the product that reads `formed`
  // takes Input::kRmsNormAhead with the same `sums` and eps.
  struct NormAhead {
    const Tensor* weight = nullptr;  // [hidden], the producer's
    const Tensor* formed = nullptr;  // the producer's
    const Tensor* sums = nullptr;    // both
  };
  NormAhead norm_ahead{};
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual Allocator& allocator() = 0;
  // The dtype activations and weights are computed in.
  virtual DType compute_dtype() const = 0;

  // Throws Error(kUnsupported) naming what is missing (a head_dim without a
  // kernel, a dtype the device lacks) so a model is refused before its weights
  // are loaded rather than at the first request.
  virtual void check_supported(const ModelRequirements& requirements) const { (void)requirements; }

  // Moves a host tensor to this backend in its compute dtype (float types).
  virtual Tensor upload_weight(const Tensor& host) = 0;
  // Copies a tensor to a host f32 tensor (waits for the device).
  virtual Tensor to_host_f32(const Tensor& t) = 0;

  // Called once per forward before the layers run: a device backend uploads
  // the batch's positions and block tables here, once, for every layer.
  virtual void prepare(const AttentionBatch& batch) { (void)batch; }

  // dst = src, same shape and dtype, both on this backend (queued, not waited for).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // Waits until every queued op has finished (benchmarks time with this).
  virtual void synchronize() = 0;
  // The device stream every op is queued on (a cudaStream_t on CUDA), so a
  // communicator can order its collectives on it; null on the CPU.
  virtual void* stream_handle() { return nullptr; }
  // Seconds per call of `fn` (which queues ops on this backend), the mean of
  // `repeats` calls after one warm-up call, by the device's own clock where it
  // has one (CUDA events on the stream); here by the host clock.
  virtual double time_per_call(const std::function<void()>& fn, int repeats) {
    fn();
    synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) fn();
    synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
  }

  // out[i, :] = table[ids[i], :]          table [vocab, hidden], out [n, hidden]
  virtual void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) = 0;
  // out = x / rms(x) * weight               x, out [n, hidden], weight [hidden]
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  // residual += x; out = rms_norm(residual)  residual, x, out [n, hidden]
  virtual void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  // Qwen3's q and k norms, in place: every q head and k head of every token
  // becomes head / rms(head) * weight over head_dim (q heads by q_weight, k
  // heads by k_weight, both [head_dim]); v is left as it is.
  //   qkv [n, (num_heads + 2 * num_kv_heads) * head_dim]
  virtual void head_rms_norm(Tensor& qkv, int64_t num_heads, int64_t num_kv_heads, const Tensor& q_weight,
                             const Tensor& k_weight, float eps) = 0;
  // out = x · weightᵀ (+ bias)              x [n, in], weight [out, in], bias [out] or undefined, out [n, out]
  //                                         out is in the compute dtype, or f32 (the logits)
  virtual void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) = 0;
  // Rotates q and k in place (HF rotate_half: pairs (i, i + head_dim/2)) by
  // positions[t] · inv_freq[seq(t)], then scales by attention_scaling, and writes
  // the rotated k and v of every new token into the paged cache.
  //   qkv [n, (num_heads + 2 * num_kv_heads) * head_dim]: q | k | v per token
  //   inv_freq [num_seqs, head_dim / 2] (per sequence: dynamic NTK changes the base)
  virtual void rope_and_cache_write(Tensor& qkv, int64_t num_heads, const std::vector<float>& inv_freq,
                                    float attention_scaling, const AttentionBatch& batch, PagedKvLayer& cache,
                                    int64_t block_size) = 0;
  // Causal GQA attention of the new tokens over the cache (which already holds them).
  //   qkv [n, qkv_size] (only the q part is read), out [n, num_heads * head_dim]
  virtual void paged_attention(const Tensor& qkv, int64_t num_heads, const AttentionBatch& batch,
                               const PagedKvLayer& cache, int64_t block_size, Tensor& out) = 0;
  // rope_and_cache_write, then paged_attention: one op, so that a backend may
  // run both in one kernel where the step allows (CUDA: steps of decode tokens
  // only). qkv's q and k parts are then left unrotated (the rotated k is in
  // the cache); the default runs the two ops.
  virtual void rope_attention(Tensor& qkv, int64_t num_heads, const std::vector<float>& inv_freq,
                              float attention_scaling, const AttentionBatch& batch, PagedKvLayer& cache,
                              int64_t block_size, Tensor& out);
  // out (=|+=) fusion's input(x) · Wᵀ (+ bias), W the 16-bit `weight` or, where
  // defined, the 4-bit `packed` one. The default runs the separate ops.
  virtual void fused_linear(const Tensor& x, const LinearFusion& fusion, const Tensor& weight,
                            const QuantizedWeight& packed, const Tensor& bias, Tensor& out);
  // Whether fused_linear can store silu(gate) · up (LinearFusion::Output::
  // kSiluMul) from a product with this uploaded 4-bit weight at `rows` rows.
  virtual bool stores_silu_mul(const QuantizedWeight& packed, int64_t rows) const {
    (void)packed;
    (void)rows;
    return false;
  }
  // Whether fused_linear can form an RMSNorm ahead (LinearFusion::
  // norm_ahead) in a product with this uploaded 4-bit weight at `rows` rows,
  // and read one (Input::kRmsNormAhead).
  virtual bool forms_norm_ahead(const QuantizedWeight& packed, int64_t rows) const {
    (void)packed;
    (void)rows;
    return false;
  }
  // out = silu(gate) * up                   gate_up [n, 2 * inter] as gate | up, out [n, inter]
  virtual void silu_mul(const Tensor& gate_up, Tensor& out) = 0;
  // x += y                                  same shapes
  virtual void add(Tensor& x, const Tensor& y) = 0;
  // Whether sample_rows runs here: a device backend samples where its logits
  // are; on the CPU backend the logits already are host memory and
  // engine::Sampler takes them as they are.
  virtual bool samples_rows() const { return false; }
  // One token per row of logits [m, vocab] f32 on this backend, sampled by
  // `sampling` (row_sampling.h: m rows, edits applied to the logits in place);
  // only the m ids come to the host (waits for the device). Throws
  // Error(kUnsupported) where samples_rows() is false.
  virtual std::vector<int32_t> sample_rows(Tensor& logits, const SamplingBatch& sampling);
  // Selected rows of x, gathered:           x [n, hidden], rows [m] -> out [m, hidden]
  virtual void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) = 0;

  // Device graphs of whole forwards (decode steps), where the backend has them:
  //   1. run a forward as usual: its results, and every upload buffer sized;
  //   2. begin_capture(), the same forward again, end_capture(): its kernels
  //      are recorded, not run, and read the inputs step 1 uploaded;
  //   3. a later step of the same shapes: set_staging(true), the forward (its
  //      host inputs are uploaded to the same buffers, no kernel runs),
  //      set_staging(false), replay().
  // Buffers the recorded kernels read only ever move by growing; each move
  // changes graph_generation(), and graphs recorded before it are stale.
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture();
  // Throws Error(kDeviceFailure or kOutOfMemory) when the graph cannot be
  // made; the backend is then back to running ops as usual.
  virtual std::unique_ptr<DeviceGraph> end_capture();
  virtual void set_staging(bool staging) { (void)staging; }
  virtual uint64_t graph_generation() const { return 0; }

  // 4-bit weights (quantized_weight.h). A backend that keeps them packed says
  // so here; the model dequantizes for any other (the CPU computes in f32).
  virtual bool supports_quantized_linear() const { return false; }
  // Moves a host QuantizedWeight (canonical layout) to this backend, in the
  // layout its kernel reads.
  virtual QuantizedWeight upload_quantized_weight(const QuantizedWeight& host);
  // Before a model's upload: the bytes its weights will take here, of them
  // the 4-bit linears'. A backend that would keep the 4-bit weights twice
  // (CUDA on Hopper, cuda/w4_linear.h) keeps one copy where two would leave
  // too little memory, and logs it.
  virtual void plan_quantized_copies(size_t weight_bytes, size_t packed_bytes) {
    (void)weight_bytes;
    (void)packed_bytes;
  }
  // Before a model's upload, where the memory plan was made before it
  // (tensor-parallel ranks): the bytes the KV cache, the workspace and the
  // decode graphs need free once the weights are in, and how many ranks
  // (this one included) load their shares onto this device. Such a backend
  // makes no second copies that would take them or the other ranks' shares.
  virtual void keep_free_after_weights(size_t bytes, int ranks_sharing) {
    (void)bytes;
    (void)ranks_sharing;
  }
  // The bytes of such second copies made so far (0 where none is kept):
  // device memory the weights take beyond the checkpoint's own bytes.
  virtual size_t quantized_copy_bytes() const { return 0; }
  // out = x · dequantize(weight)ᵀ (+ bias)  x [n, in], bias [out] or undefined, out [n, out] (compute dtype)
  virtual void linear_quantized(const Tensor& x, const QuantizedWeight& weight, const Tensor& bias, Tensor& out);
};

std::unique_ptr<Backend> make_cpu_backend();

// The CUDA backend on device `index`, computing in `compute_dtype` (f32, f16 or
// bf16). Throws Error(kUnsupported) in a build without CUDA, and
// Error(kDeviceFailure) when the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int index, DType compute_dtype);

struct CudaDeviceInfo {
  std::string name;
  int compute_major = 0, compute_minor = 0;
  size_t total_memory = 0, free_memory = 0;
  // The kernel image the CUDA runtime loaded for this device (asked of one of
  // tessera's kernels): its PTX (virtual) and binary architectures as
  // 10·major + minor, both 0 when no image in this build runs here. A build
  // of compute_75 PTX only, JIT-compiled on an sm_90 GPU, reads ptx 75.
  int image_ptx_arch = 0, image_binary_arch = 0;
  std::string built_archs;  // the build's architecture list (TESSERA_CUDA_ARCHS)

  int device_capability() const { return compute_major * 10 + compute_minor; }
  // What the loaded kernels can use: min(device, image); 0 when no image loads.
  int effective_capability() const;
  bool supports_bf16() const { return effective_capability() >= 80; }
  // "SASS for sm_90" or "PTX from compute_75, JIT-compiled for sm_90"
  std::string describe_image() const;
};

// 0 when this build has no CUDA backend or no usable driver/device.
int cuda_device_count();

// Whether this build holds FlashInfer's sm_90a prefill attention (its
// architectures include 90 and the headers were there at configure time).
bool flashinfer_prefill_built();
CudaDeviceInfo cuda_device_info(int index);

// The compute dtype for `requested` ("auto", "float16", "bfloat16", "float32")
// on `device`: the CPU always computes in f32; on a GPU auto is bf16 from compute capability 8.0
// or newer, f16 (logged) on older GPUs; bf16 asked of a GPU without it falls
// back to f16 with a warning, as the correct fallback.
DType choose_compute_dtype(const std::string& requested, Device device);

// choose_compute_dtype's decision as a pure function of the device's compute
// capability, the loaded kernel image's architecture (0: unknown, taken as the
// device's) and the request; `message` says why when the dtype differs from
// what a bf16-capable GPU would give, `warn` whether it is a warning.
struct ComputeDtypeDecision {
  DType dtype = DType::kF32;
  std::string message;
  bool warn = false;
};
ComputeDtypeDecision decide_compute_dtype(const std::string& requested, int device_capability, int image_arch);

// Which kernel a CUDA backend runs attention with for steps that hold a
// prefill chunk. kAuto: FlashInfer's Hopper kernel where the build holds it
// and the step allows it (compute capability 9.0, bf16, head_dim 128, no
// sliding window; TESSERA_SM90_PREFILL=0 leaves it out), else our
// tensor-core kernel where dtype (f16/bf16), head_dim (64/128) and the loaded
// image (compute_80+) allow it, else the scalar one. kTensorCore or
// kFlashInfer where it cannot run throws Error(kUnsupported) at the launch.
// Process-wide; for benchmarks and tests that compare them.
enum class PrefillAttentionKernel { kAuto, kScalar, kTensorCore, kFlashInfer };
void set_prefill_attention_kernel(PrefillAttentionKernel kernel);
PrefillAttentionKernel prefill_attention_kernel();

}  // namespace tessera::backend
