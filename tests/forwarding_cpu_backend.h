// A base for test doubles of a backend: every op the Backend interface
// requires goes to a CPU backend it owns; a double overrides what it changes
// (recording ops for replay, sampling rows where the logits are).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"

namespace tessera::testing {

class ForwardingCpuBackend : public backend::Backend {
 public:
  ForwardingCpuBackend() : cpu_(backend::make_cpu_backend()) {}

  Device device() const override { return cpu_->device(); }
  Allocator& allocator() override { return cpu_->allocator(); }
  DType compute_dtype() const override { return cpu_->compute_dtype(); }
  Tensor upload_weight(const Tensor& host) override { return cpu_->upload_weight(host); }
  Tensor to_host_f32(const Tensor& t) override { return cpu_->to_host_f32(t); }
  void copy(const Tensor& src, Tensor& dst) override { cpu_->copy(src, dst); }
  void synchronize() override { cpu_->synchronize(); }
  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override {
    cpu_->embedding(table, ids, out);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    cpu_->rms_norm(x, weight, eps, out);
  }
  void head_rms_norm(Tensor& qkv, int64_t num_heads, int64_t num_kv_heads, const Tensor& q_weight,
                     const Tensor& k_weight, float eps) override {
    cpu_->head_rms_norm(qkv, num_heads, num_kv_heads, q_weight, k_weight, eps);
  }
  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    cpu_->add_rms_norm(residual, x, weight, eps, out);
  }
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) override {
    cpu_->linear(x, weight, bias, out);
  }
  void rope_and_cache_write(Tensor& qkv, int64_t num_heads, const std::vector<float>& inv_freq,
                            float attention_scaling, const backend::AttentionBatch& batch,
                            backend::PagedKvLayer& cache, int64_t block_size) override {
    cpu_->rope_and_cache_write(qkv, num_heads, inv_freq, attention_scaling, batch, cache, block_size);
  }
  void paged_attention(const Tensor& qkv, int64_t num_heads, const backend::AttentionBatch& batch,
                       const backend::PagedKvLayer& cache, int64_t block_size, Tensor& out) override {
    cpu_->paged_attention(qkv, num_heads, batch, cache, block_size, out);
  }
  void silu_mul(const Tensor& gate_up, Tensor& out) override { cpu_->silu_mul(gate_up, out); }
  void add(Tensor& x, const Tensor& y) override { cpu_->add(x, y); }
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    cpu_->gather_rows(x, rows, out);
  }

 protected:
  backend::Backend& cpu() { return *cpu_; }

 private:
  std::unique_ptr<backend::Backend> cpu_;
};

}  // namespace tessera::testing
