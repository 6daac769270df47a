#include "backend/backend.h"

#include "core/error.h"

namespace tessera::backend {

// A backend without device graphs: the model never calls these there (it asks
// supports_graphs() first).
void Backend::begin_capture() {
  throw Error(ErrorKind::kInternal, "this backend records no device graphs");
}

std::unique_ptr<DeviceGraph> Backend::end_capture() {
  throw Error(ErrorKind::kInternal, "this backend records no device graphs");
}

std::vector<int32_t> Backend::sample_rows(Tensor& logits, const SamplingBatch& sampling) {
  (void)logits;
  (void)sampling;
  throw Error(ErrorKind::kUnsupported, "this backend does not sample rows itself (samples_rows() is false)");
}

void Backend::rope_attention(Tensor& qkv, int64_t num_heads, const std::vector<float>& inv_freq,
                             float attention_scaling, const AttentionBatch& batch, PagedKvLayer& cache,
                             int64_t block_size, Tensor& out) {
  rope_and_cache_write(qkv, num_heads, inv_freq, attention_scaling, batch, cache, block_size);
  paged_attention(qkv, num_heads, batch, cache, block_size, out);
}

// The separate ops, each into a temporary where the fused call has none.
void Backend::fused_linear(const Tensor& x, const LinearFusion& fusion, const Tensor& weight,
                           const QuantizedWeight& packed, const Tensor& bias, Tensor& out) {
  if (fusion.output != LinearFusion::Output::kAsIs) {
    throw Error(ErrorKind::kInternal, "fused_linear: this backend stores no SiLU·mul from a product");
  }
  if (fusion.input == LinearFusion::Input::kRmsNormAhead || fusion.norm_ahead.weight != nullptr) {
    throw Error(ErrorKind::kInternal, "fused_linear: this backend forms no RMSNorm ahead");
  }
  Tensor input = x;
  if (fusion.input != LinearFusion::Input::kAsIs) {
    const Shape shape = {x.dim(0), fusion.input == LinearFusion::Input::kSiluMul ? x.dim(1) / 2 : x.dim(1)};
    const size_t bytes = dtype_bytes(x.dtype(), static_cast<size_t>(shape_numel(shape)));
    input = fusion.scratch != nullptr && fusion.scratch->nbytes() >= bytes
                ? Tensor(fusion.scratch->buffer(), 0, x.dtype(), shape)
                : Tensor::empty(shape, x.dtype(), allocator());
  }
  if (fusion.input == LinearFusion::Input::kRmsNorm) {
    TESSERA_CHECK(fusion.norm_weight != nullptr);
    rms_norm(x, *fusion.norm_weight, fusion.eps, input);
  } else if (fusion.input == LinearFusion::Input::kSiluMul) {
    silu_mul(x, input);
  }
  Tensor result = fusion.accumulate ? Tensor::empty(out.shape(), out.dtype(), allocator()) : out;
  if (packed.defined()) {
    linear_quantized(input, packed, bias, result);
  } else {
    linear(input, weight, bias, result);
  }
  if (fusion.accumulate) add(out, result);
}

}  // namespace tessera::backend
