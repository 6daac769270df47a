// The CPU backend: Backend's ops over host f32 tensors, by the kernels in
// kernels.h. Shapes are checked here, once, so kernels can trust their sizes.
#include <fmt/format.h>

#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace tessera::backend {

namespace {

void expect_f32(const Tensor& t, const char* what) {
  if (!t.defined() || t.dtype() != DType::kF32 || !t.contiguous() || !t.device().is_cpu()) {
    throw Error(ErrorKind::kInternal,
                fmt::format("cpu backend: {} must be a contiguous host f32 tensor, got {}", what,
                            t.defined() ? t.describe() : "undefined"));
  }
}

void expect_shape(const Tensor& t, const Shape& shape, const char* what) {
  if (t.shape() != shape) {
    throw Error(ErrorKind::kInternal, fmt::format("cpu backend: {} has shape {}, expected {}", what,
                                                  shape_to_string(t.shape()), shape_to_string(shape)));
  }
}

// The sequence of each new token: [num_tokens].
std::vector<int32_t> token_sequences(const AttentionBatch& batch) {
  std::vector<int32_t> token_seq(batch.num_tokens());
  for (int64_t s = 0; s < batch.num_seqs(); ++s) {
    for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) token_seq[t] = static_cast<int32_t>(s);
  }
  return token_seq;
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  Allocator& allocator() override { return cpu_allocator(); }
  DType compute_dtype() const override { return DType::kF32; }

  // f32 host tensors are used as they are (no copy): weights the model
  // assembled are already in the compute dtype.
  Tensor upload_weight(const Tensor& host) override {
    return host.dtype() == DType::kF32 && host.contiguous() && host.device().is_cpu() ? host : host.to_f32();
  }
  Tensor to_host_f32(const Tensor& t) override { return t.to_f32(); }

  void copy(const Tensor& src, Tensor& dst) override {
    TESSERA_CHECK(src.nbytes() == dst.nbytes() && src.contiguous() && dst.contiguous());
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
  }
  void synchronize() override {}

  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override {
    expect_f32(table, "embedding table");
    expect_f32(out, "embedding output");
    expect_shape(out, {static_cast<int64_t>(ids.size()), table.dim(1)}, "embedding output");
    cpu::embedding(table.data<float>(), table.dim(0), table.dim(1), ids.data(), static_cast<int64_t>(ids.size()),
                   out.data<float>());
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    expect_f32(x, "rms_norm input");
    expect_shape(out, x.shape(), "rms_norm output");
    expect_shape(weight, {x.dim(-1)}, "rms_norm weight");
    cpu::rms_norm(x.data<float>(), weight.data<float>(), x.dim(0), x.dim(-1), eps, out.data<float>());
  }

  void head_rms_norm(Tensor& qkv, int64_t num_heads, int64_t num_kv_heads, const Tensor& q_weight,
                     const Tensor& k_weight, float eps) override {
    expect_f32(qkv, "qkv");
    const int64_t head_dim = q_weight.dim(0);
    expect_shape(k_weight, {head_dim}, "k norm weight");
    expect_shape(qkv, {qkv.dim(0), (num_heads + 2 * num_kv_heads) * head_dim}, "qkv");
    cpu::head_rms_norm(qkv.data<float>(), qkv.dim(0), qkv.dim(1), num_heads, num_kv_heads, head_dim,
                       q_weight.data<float>(), k_weight.data<float>(), eps);
  }

  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    expect_f32(residual, "residual");
    expect_shape(x, residual.shape(), "add_rms_norm input");
    expect_shape(out, residual.shape(), "add_rms_norm output");
    expect_shape(weight, {residual.dim(-1)}, "rms_norm weight");
    cpu::add_rms_norm(residual.data<float>(), x.data<float>(), weight.data<float>(), residual.dim(0),
                      residual.dim(-1), eps, out.data<float>());
  }

  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) override {
    expect_f32(x, "linear input");
    expect_f32(weight, "linear weight");
    if (weight.dim(1) != x.dim(1)) {
      throw Error(ErrorKind::kInternal, fmt::format("cpu backend: linear input {} does not fit weight {}",
                                                    x.describe(), weight.describe()));
    }
    expect_shape(out, {x.dim(0), weight.dim(0)}, "linear output");
    if (bias.defined()) expect_shape(bias, {weight.dim(0)}, "linear bias");
    cpu::linear(x.data<float>(), weight.data<float>(), bias.defined() ? bias.data<float>() : nullptr, x.dim(0),
                weight.dim(0), x.dim(1), out.data<float>());
  }

  void rope_and_cache_write(Tensor& qkv, int64_t num_heads, const std::vector<float>& inv_freq,
                            float attention_scaling, const AttentionBatch& batch, PagedKvLayer& cache,
                            int64_t block_size) override {
    expect_f32(qkv, "qkv");
    const int64_t num_kv_heads = cache.keys.dim(1);
    const int64_t head_dim = cache.keys.dim(3);
    const int64_t qkv_size = (num_heads + 2 * num_kv_heads) * head_dim;
    expect_shape(qkv, {batch.num_tokens(), qkv_size}, "qkv");
    TESSERA_CHECK(static_cast<int64_t>(inv_freq.size()) == batch.num_seqs() * head_dim / 2);
    const int bits = cache.code_bits();  // 0: the cache holds f32
    const int64_t row_bytes = head_dim * bits / 8;
    // One parallel region over every new token (not one per sequence): a
    // decode step of many sequences would otherwise pay a fork/join each.
    const std::vector<int32_t> token_seq = token_sequences(batch);
#pragma omp parallel for
    for (int64_t t = 0; t < batch.num_tokens(); ++t) {
      const int64_t s = token_seq[t];
      const float* seq_inv_freq = inv_freq.data() + s * head_dim / 2;
      const int32_t* table = batch.block_tables.data() + s * batch.max_blocks_per_seq;
      float* row = qkv.data<float>() + t * qkv_size;
      const int32_t position = batch.positions[t];
      for (int64_t h = 0; h < num_heads + num_kv_heads; ++h) {
        cpu::rope_rotate(row + h * head_dim, head_dim, position, seq_inv_freq, attention_scaling);
      }
      const int64_t block = table[position / block_size];
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        const int64_t cache_row = (block * num_kv_heads + h) * block_size + position % block_size;
        const float* key = row + (num_heads + h) * head_dim;
        const float* value = row + (num_heads + num_kv_heads + h) * head_dim;
        if (bits != 0) {
          cpu::quantize_row(key, head_dim, bits, cache.keys.data<uint8_t>() + cache_row * row_bytes,
                            cache.key_params.data<float>() + cache_row * 2);
          cpu::quantize_row(value, head_dim, bits, cache.values.data<uint8_t>() + cache_row * row_bytes,
                            cache.value_params.data<float>() + cache_row * 2);
        } else {
          std::copy_n(key, head_dim, cache.keys.data<float>() + cache_row * head_dim);
          std::copy_n(value, head_dim, cache.values.data<float>() + cache_row * head_dim);
        }
      }
    }
  }

  void paged_attention(const Tensor& qkv, int64_t num_heads, const AttentionBatch& batch, const PagedKvLayer& cache,
                       int64_t block_size, Tensor& out) override {
    expect_f32(qkv, "qkv");
    const int64_t num_kv_heads = cache.keys.dim(1);
    const int64_t head_dim = cache.keys.dim(3);
    const int64_t qkv_size = (num_heads + 2 * num_kv_heads) * head_dim;
    const int64_t group = num_heads / num_kv_heads;
    expect_shape(out, {batch.num_tokens(), num_heads * head_dim}, "attention output");
    const std::vector<int32_t> token_seq = token_sequences(batch);
#pragma omp parallel for collapse(2)
    for (int64_t t = 0; t < batch.num_tokens(); ++t) {
      for (int64_t h = 0; h < num_heads; ++h) {
        const int32_t* table = batch.block_tables.data() + int64_t(token_seq[t]) * batch.max_blocks_per_seq;
        const int64_t last = batch.positions[t];
        const int64_t first = batch.sliding_window > 0 ? std::max<int64_t>(0, last - batch.sliding_window + 1) : 0;
        const float* q = qkv.data<float>() + t * qkv_size + h * head_dim;
        float* o = out.data<float>() + (t * num_heads + h) * head_dim;
        if (cache.quantized()) {
          cpu::attend_one_quantized(q, cache.code_bits(), cache.keys.data<uint8_t>(), cache.key_params.data<float>(),
                                    cache.values.data<uint8_t>(), cache.value_params.data<float>(), table,
                                    num_kv_heads, h / group, block_size, head_dim, first, last, o);
        } else {
          cpu::attend_one(q, cache.keys.data<float>(), cache.values.data<float>(), table, num_kv_heads, h / group,
                          block_size, head_dim, first, last, o);
        }
      }
    }
  }

  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    expect_f32(gate_up, "gate_up");
    expect_shape(out, {gate_up.dim(0), gate_up.dim(1) / 2}, "silu_mul output");
    cpu::silu_mul(gate_up.data<float>(), gate_up.dim(0), gate_up.dim(1) / 2, out.data<float>());
  }

  void add(Tensor& x, const Tensor& y) override {
    expect_f32(x, "add input");
    expect_shape(y, x.shape(), "add operand");
    float* a = x.data<float>();
    const float* b = y.data<float>();
    const int64_t n = x.numel();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  }

  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    expect_f32(x, "gather input");
    const int64_t width = x.dim(1);
    expect_shape(out, {static_cast<int64_t>(rows.size()), width}, "gather output");
    for (size_t i = 0; i < rows.size(); ++i) {
      TESSERA_CHECK(rows[i] >= 0 && rows[i] < x.dim(0));
      std::copy_n(x.data<float>() + rows[i] * width, width, out.data<float>() + i * width);
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tessera::backend
