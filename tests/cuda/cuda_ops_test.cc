// Every CUDA op against its CPU twin (the judge), through the Backend
// interface, on random inputs over a grid of shapes. Inputs are rounded to the
// CUDA compute dtype first, so both sides see the same numbers; bounds are per
// dtype. Skips when no GPU is visible. ctest label: gpu.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

#include "../attention_batch.h"
#include "../compare.h"
#include "backend/backend.h"
#include "core/error.h"

namespace tessera::backend {
namespace {

struct Bounds {
  double max_abs, rel_norm;
};

Bounds bounds_for(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {2e-4, 1e-5};
    case DType::kF16: return {2e-2, 2e-3};
    default: return {1e-1, 1e-2};  // bf16: 8 bits of mantissa
  }
}

// A batch of sequences with chunked prefill and decode tokens, shuffled blocks.
// Steps with only decode tokens take the per-query kernel, others the tiled one.
struct AttentionCase {
  int64_t heads, kv_heads, head_dim, block_size, window;
  std::vector<int32_t> context_lens;  // tokens in cache after the step, per sequence
  std::vector<int32_t> new_tokens;    // new tokens this step, per sequence
};

class CudaVsCpu : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    dtype_ = GetParam();
    cuda_ = make_cuda_backend(0, dtype_);
    cpu_ = make_cpu_backend();
  }

  // Random values rounded to the compute dtype, as a host f32 tensor.
  Tensor random(Shape shape, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> values(shape_numel(shape));
    for (float& v : values) v = offset + dist(rng);
    return Tensor::from_f32(values, shape).to_dtype(dtype_).to_f32();
  }
  Tensor on_gpu(const Tensor& host) { return cuda_->upload_weight(host); }
  Tensor gpu_empty(Shape shape) { return Tensor::empty(std::move(shape), dtype_, cuda_->allocator()); }

  void expect_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
    Tensor got = cuda_->to_host_f32(gpu);
    ASSERT_EQ(got.shape(), cpu.shape()) << what;
    Bounds b = bounds_for(dtype_);
    auto c = testing::compare(got.data<float>(), cpu.data<float>(), static_cast<size_t>(cpu.numel()));
    EXPECT_TRUE(c.within(b.max_abs, b.rel_norm)) << what << " (" << dtype_name(dtype_) << "): " << c.describe();
  }

  // The step of `c` (`batch`): the same random qkv on both sides, rotated and
  // written into each side's cache, the rotations compared. Returns the
  // rotated qkv, CPU's and GPU's.
  std::pair<Tensor, Tensor> write_step(const AttentionCase& c, const AttentionBatch& batch, PagedKvLayer& cpu_cache,
                                       PagedKvLayer& gpu_cache, const std::string& name);

  DType dtype_ = DType::kF32;
  std::unique_ptr<Backend> cuda_, cpu_;
};

TEST_P(CudaVsCpu, EmbeddingAndGather) {
  for (int64_t hidden : {64, 1000}) {
    Tensor table = random({97, hidden}, 1);
    std::vector<int32_t> ids = {0, 5, 96, 5, 13, 40, 1};
    Tensor cpu_out = Tensor::empty({7, hidden}, DType::kF32), gpu_out = gpu_empty({7, hidden});
    Tensor gpu_table = on_gpu(table);
    cpu_->embedding(table, ids, cpu_out);
    cuda_->embedding(gpu_table, ids, gpu_out);
    expect_close(gpu_out, cpu_out, "embedding");
    std::vector<int32_t> rows = {6, 0, 3};
    Tensor cpu_rows = Tensor::empty({3, hidden}, DType::kF32), gpu_rows = gpu_empty({3, hidden});
    cpu_->gather_rows(cpu_out, rows, cpu_rows);
    cuda_->gather_rows(gpu_out, rows, gpu_rows);
    expect_close(gpu_rows, cpu_rows, "gather_rows");
  }
  Tensor table = on_gpu(random({10, 8}, 2));
  Tensor out = gpu_empty({1, 8});
  EXPECT_THROW(cuda_->embedding(table, {10}, out), Error);
}

TEST_P(CudaVsCpu, RmsNormAndResidual) {
  // Widths of the vector kernel (1 to 4 vectors a thread) and of the scalar one (1001: not whole vectors).
  for (int64_t n : {1, 7, 33})
    for (int64_t hidden : {64, 1000, 1001, 4096, 6144, 16384}) {
      Tensor x = random({n, hidden}, 3), w = random({hidden}, 4, 0.2f, 1.0f), r = random({n, hidden}, 5);
      Tensor cpu_out = Tensor::empty({n, hidden}, DType::kF32), gpu_out = gpu_empty({n, hidden});
      cpu_->rms_norm(x, w, 1e-5f, cpu_out);
      cuda_->rms_norm(on_gpu(x), on_gpu(w), 1e-5f, gpu_out);
      expect_close(gpu_out, cpu_out, "rms_norm");
      Tensor cpu_res = r.to_f32(), gpu_res = on_gpu(r);
      cpu_->add_rms_norm(cpu_res, x, w, 1e-5f, cpu_out);
      cuda_->add_rms_norm(gpu_res, on_gpu(x), on_gpu(w), 1e-5f, gpu_out);
      expect_close(gpu_out, cpu_out, "add_rms_norm output");
      expect_close(gpu_res, cpu_res, "add_rms_norm residual");
    }
}

// Qwen3's q and k norms over a grid of head counts and dims: every q and k
// head normalised in place, v untouched (compared too).
TEST_P(CudaVsCpu, HeadRmsNormOfQAndK) {
  for (int64_t n : {1, 5, 64})
    for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 2}, {32, 8}, {3, 3}})
      for (int64_t head_dim : {32, 64, 128, 256}) {
        const int64_t width = (heads + 2 * kv_heads) * head_dim;
        Tensor qkv = random({n, width}, 6, 3.0f);
        Tensor qw = random({head_dim}, 7, 0.5f, 1.0f), kw = random({head_dim}, 8, 0.5f, 1.0f);
        Tensor cpu_qkv = qkv.to_f32(), gpu_qkv = on_gpu(qkv);
        cpu_->head_rms_norm(cpu_qkv, heads, kv_heads, qw, kw, 1e-6f);
        cuda_->head_rms_norm(gpu_qkv, heads, kv_heads, on_gpu(qw), on_gpu(kw), 1e-6f);
        expect_close(gpu_qkv, cpu_qkv, fmt::format("head_rms_norm n {} heads {}/{} head_dim {}", n, heads, kv_heads,
                                                   head_dim));
      }
}

TEST_P(CudaVsCpu, LinearSiluMulAdd) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 64}, {7, 300, 129}, {33, 1024, 512}}) {
    Tensor x = random({m, k}, 6), w = random({n, k}, 7, 0.1f), bias = random({n}, 8);
    Tensor cpu_out = Tensor::empty({m, n}, DType::kF32), gpu_out = gpu_empty({m, n});
    cpu_->linear(x, w, bias, cpu_out);
    cuda_->linear(on_gpu(x), on_gpu(w), on_gpu(bias), gpu_out);
    expect_close(gpu_out, cpu_out, "linear+bias");
    // f32 output (the logits path) from 16-bit inputs
    Tensor gpu_f32 = Tensor::empty({m, n}, DType::kF32, cuda_->allocator());
    cpu_->linear(x, w, Tensor(), cpu_out);
    cuda_->linear(on_gpu(x), on_gpu(w), Tensor(), gpu_f32);
    expect_close(gpu_f32, cpu_out, "linear f32 out");
  }
  // 77 takes the scalar kernel, 96 and 1024 the 16-byte one.
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{5, 77}, {5, 96}, {3, 1024}}) {
    Tensor gu = random({rows, 2 * width}, 9, 3.0f);
    Tensor cpu_out = Tensor::empty({rows, width}, DType::kF32), gpu_out = gpu_empty({rows, width});
    cpu_->silu_mul(gu, cpu_out);
    cuda_->silu_mul(on_gpu(gu), gpu_out);
    expect_close(gpu_out, cpu_out, "silu_mul width " + std::to_string(width));
  }
  Tensor a = random({3, 50}, 10), b = random({3, 50}, 11);
  Tensor cpu_a = a.to_f32(), gpu_a = on_gpu(a);
  cpu_->add(cpu_a, b);
  cuda_->add(gpu_a, on_gpu(b));
  expect_close(gpu_a, cpu_a, "add");
}


const std::vector<AttentionCase>& attention_cases() {
  static const std::vector<AttentionCase> cases = {
      {4, 4, 64, 16, 0, {17}, {17}},
      {8, 2, 128, 64, 0, {70, 1, 130}, {1, 1, 30}},
      {8, 1, 64, 16, 0, {5, 40}, {5, 1}},
      {4, 2, 32, 1, 0, {9}, {4}},
      {4, 1, 64, 16, 6, {40, 12}, {1, 12}},
      {2, 2, 96, 8, 0, {33}, {33}},
      {2, 1, 256, 16, 0, {20}, {3}},
      {8, 4, 8, 16, 0, {21, 3}, {1, 3}},
      // decode only (one new token per sequence): the per-query kernel
      {8, 2, 128, 16, 0, {70, 33, 5}, {1, 1, 1}},
      {4, 1, 64, 16, 5, {40, 2}, {1, 1}},
      // long prefill chunks over several 64-query tiles: the tiled kernel
      {4, 1, 64, 16, 0, {200}, {200}},
      {4, 2, 128, 64, 0, {300, 150}, {130, 150}},
      {4, 1, 64, 16, 20, {150, 70}, {150, 1}},
      {2, 2, 96, 32, 0, {129}, {65}},
      {2, 1, 256, 16, 0, {90}, {90}},
  };
  return cases;
}

// The step of case `c`: each sequence's new tokens end its context.
AttentionBatch case_batch(const AttentionCase& c) {
  return testing::shuffled_attention_batch(c.context_lens, c.new_tokens, c.block_size, c.window, 3);
}

// Different frequencies for each sequence, as dynamic NTK gives.
std::vector<float> case_inv_freq(const AttentionCase& c) {
  std::vector<float> inv_freq;
  for (size_t s = 0; s < c.context_lens.size(); ++s)
    for (int64_t i = 0; i < c.head_dim / 2; ++i) inv_freq.push_back(std::pow(10000.0f + 1000.0f * s, -2.0f * i / c.head_dim));
  return inv_freq;
}

std::string case_name(const AttentionCase& c) {
  return fmt::format("hd{} {}/{} block {} contexts {}", c.head_dim, c.heads, c.kv_heads, c.block_size,
                     fmt::join(c.context_lens, ","));
}

std::pair<Tensor, Tensor> CudaVsCpu::write_step(const AttentionCase& c, const AttentionBatch& batch,
                                                 PagedKvLayer& cpu_cache, PagedKvLayer& gpu_cache,
                                                 const std::string& name) {
  const std::vector<float> inv_freq = case_inv_freq(c);
  Tensor qkv = random({batch.num_tokens(), (c.heads + 2 * c.kv_heads) * c.head_dim}, 14);
  Tensor cpu_qkv = qkv.to_f32(), gpu_qkv = on_gpu(qkv);
  cpu_->prepare(batch);
  cuda_->prepare(batch);
  cpu_->rope_and_cache_write(cpu_qkv, c.heads, inv_freq, 1.25f, batch, cpu_cache, c.block_size);
  cuda_->rope_and_cache_write(gpu_qkv, c.heads, inv_freq, 1.25f, batch, gpu_cache, c.block_size);
  expect_close(gpu_qkv, cpu_qkv, "rope " + name);
  return {cpu_qkv, gpu_qkv};
}

TEST_P(CudaVsCpu, RopeCacheWriteAndPagedAttention) {
  for (const AttentionCase& c : attention_cases()) {
    const AttentionBatch batch = case_batch(c);
    const int64_t n = batch.num_tokens(), num_blocks = static_cast<int64_t>(batch.block_tables.size());
    const Shape cache_shape = {num_blocks, c.kv_heads, c.block_size, c.head_dim};
    // The cache already holds the earlier tokens (random), the step writes the new ones.
    Tensor k_prior = random(cache_shape, 12), v_prior = random(cache_shape, 13);
    PagedKvLayer cpu_cache{k_prior.to_f32(), v_prior.to_f32()}, gpu_cache{on_gpu(k_prior), on_gpu(v_prior)};
    const std::string name = case_name(c);
    auto [cpu_qkv, gpu_qkv] = write_step(c, batch, cpu_cache, gpu_cache, name);
    expect_close(gpu_cache.keys, cpu_cache.keys, "k cache " + name);
    expect_close(gpu_cache.values, cpu_cache.values, "v cache " + name);
    Tensor cpu_out = Tensor::empty({n, c.heads * c.head_dim}, DType::kF32), gpu_out = gpu_empty({n, c.heads * c.head_dim});
    cpu_->paged_attention(cpu_qkv, c.heads, batch, cpu_cache, c.block_size, cpu_out);
    cuda_->paged_attention(gpu_qkv, c.heads, batch, gpu_cache, c.block_size, gpu_out);
    expect_close(gpu_out, cpu_out, "attention " + name);
  }
}

// A host tensor's bytes copied into a new tensor of the same dtype on `backend`.
Tensor bytes_on(Backend& backend, const Tensor& host) {
  Tensor device = Tensor::empty(host.shape(), host.dtype(), backend.allocator());
  backend.copy(host, device);
  backend.synchronize();
  return device;
}

// Code i of a quantized cache's codes: a byte (u8), or a nibble, element 2i
// in the low one (u4).
int code_of(const Tensor& codes, int64_t i) {
  const uint8_t* bytes = codes.data<uint8_t>();
  return codes.dtype() == DType::kU8 ? bytes[i] : (bytes[i / 2] >> (4 * (i % 2))) & 0xF;
}

// A cache row's values as the quantized cache holds them (paged_kv.h's formula).
std::vector<float> dequantized(const Tensor& codes, const Tensor& params) {
  const int64_t rows = params.numel() / 2, width = codes.numel() / rows;
  std::vector<float> x(static_cast<size_t>(codes.numel()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < width; ++d) {
      x[r * width + d] =
          std::fmaf(code_of(codes, r * width + d), params.data<float>()[2 * r], params.data<float>()[2 * r + 1]);
    }
  return x;
}

// --quant-policy 8 and 4: the write into a quantized cache and attention over it.
// Both sides quantize their own rotated k (the GPU's rounded to the dtype,
// its sines and cosines a few ulps off the CPU's), so a value near a step's
// midpoint may take the next code: every dequantized value must lie within
// one step (and the dtype's rounding) of the CPU's, and in f32 nearly every
// code must be the CPU's. Attention, over the GPU's codes on both sides, is
// compared over both prefill kernels (scalar, then the default: tensor cores
// in 16 bits).
TEST_P(CudaVsCpu, RopeQuantizedCacheWriteAndPagedAttention) {
  std::vector<AttentionCase> cases = attention_cases();
  cases.push_back({8, 2, 128, 16, 0, {1000, 300}, {1, 1}});  // decode over long contexts: several splits
  cases.push_back({4, 1, 64, 16, 0, {700}, {1}});
  std::vector<std::pair<int, AttentionCase>> runs;  // (bits, case)
  for (const int bits : {8, 4}) {
    for (const AttentionCase& c : cases) runs.emplace_back(bits, c);
  }
  for (const auto& run : runs) {
    const int bits = run.first;
    const AttentionCase& c = run.second;
    const DType codes_dtype = bits == 8 ? DType::kU8 : DType::kU4;
    const AttentionBatch batch = case_batch(c);
    const int64_t n = batch.num_tokens(), num_blocks = static_cast<int64_t>(batch.block_tables.size());
    const Shape cache_shape = {num_blocks, c.kv_heads, c.block_size, c.head_dim};
    const Shape params_shape = {num_blocks, c.kv_heads, c.block_size, 2};
    // The earlier tokens: random codes, scales and zeros (values about -1.2 .. 1.3), the same on both sides.
    std::mt19937 rng(21);
    auto random_codes = [&] {
      Tensor t = Tensor::empty(cache_shape, codes_dtype);
      for (size_t i = 0; i < t.nbytes(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
      return t;
    };
    const float levels = static_cast<float>((1 << bits) - 1);
    auto random_params = [&] {
      Tensor t = Tensor::empty(params_shape, DType::kF32);
      std::uniform_real_distribution<float> scale(1.0f / levels, 2.5f / levels), zero(-1.2f, -0.8f);
      for (int64_t r = 0; r < t.numel() / 2; ++r) {
        t.data<float>()[2 * r] = scale(rng);
        t.data<float>()[2 * r + 1] = zero(rng);
      }
      return t;
    };
    PagedKvLayer cpu_cache{random_codes(), random_codes(), random_params(), random_params()};
    PagedKvLayer gpu_cache{bytes_on(*cuda_, cpu_cache.keys), bytes_on(*cuda_, cpu_cache.values),
                           bytes_on(*cuda_, cpu_cache.key_params), bytes_on(*cuda_, cpu_cache.value_params)};
    ASSERT_TRUE(cpu_cache.code_bits() == bits && gpu_cache.code_bits() == bits);
    const std::string name = fmt::format("int{} cache {}", bits, case_name(c));
    auto [cpu_qkv, gpu_qkv] = write_step(c, batch, cpu_cache, gpu_cache, name);
    for (const auto& [gpu_codes, gpu_params, cpu_codes, cpu_params, what] :
         {std::tuple{&gpu_cache.keys, &gpu_cache.key_params, &cpu_cache.keys, &cpu_cache.key_params, "k"},
          std::tuple{&gpu_cache.values, &gpu_cache.value_params, &cpu_cache.values, &cpu_cache.value_params, "v"}}) {
      Tensor codes = Tensor::empty(cache_shape, codes_dtype), params = Tensor::empty(params_shape, DType::kF32);
      cuda_->copy(*gpu_codes, codes);
      cuda_->copy(*gpu_params, params);
      cuda_->synchronize();
      const std::vector<float> got = dequantized(codes, params), want = dequantized(*cpu_codes, *cpu_params);
      const int64_t rows = params.numel() / 2;
      // The dtype's rounding of a rotated k of magnitude up to about 2.
      const float rounding = dtype_ == DType::kF32 ? 1e-5f : dtype_ == DType::kF16 ? 2e-3f : 1.6e-2f;
      int64_t moved = 0, beyond = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float step = std::max(params.data<float>()[2 * r], cpu_params->data<float>()[2 * r]);
        for (int64_t d = 0; d < c.head_dim; ++d) {
          const int64_t i = r * c.head_dim + d;
          moved += code_of(codes, i) != code_of(*cpu_codes, i);
          beyond += std::abs(got[i] - want[i]) > 1.01f * step + rounding;
        }
      }
      EXPECT_EQ(beyond, 0) << what << " values more than a step from the CPU's, " << name;
      if (dtype_ == DType::kF32) {
        EXPECT_LE(moved, codes.numel() / 50) << what << " codes not the CPU's, " << name;
      }
    }
    // Attention then reads the same codes on both sides, the GPU's as written
    // (judged above): a code a step away would move the outputs by a share
    // of the step, 17 times as large at 4 bits as at 8.
    for (auto [from, to] : {std::pair{&gpu_cache.keys, &cpu_cache.keys}, std::pair{&gpu_cache.values, &cpu_cache.values},
                            std::pair{&gpu_cache.key_params, &cpu_cache.key_params},
                            std::pair{&gpu_cache.value_params, &cpu_cache.value_params}}) {
      cuda_->copy(*from, *to);
    }
    cuda_->synchronize();
    Tensor cpu_out = Tensor::empty({n, c.heads * c.head_dim}, DType::kF32), gpu_out = gpu_empty({n, c.heads * c.head_dim});
    cpu_->paged_attention(cpu_qkv, c.heads, batch, cpu_cache, c.block_size, cpu_out);
    for (auto kernel : {PrefillAttentionKernel::kScalar, PrefillAttentionKernel::kAuto}) {
      set_prefill_attention_kernel(kernel);
      cuda_->paged_attention(gpu_qkv, c.heads, batch, gpu_cache, c.block_size, gpu_out);
      expect_close(gpu_out, cpu_out, fmt::format("attention ({}) {}", kernel == PrefillAttentionKernel::kScalar
                                                                          ? "scalar" : "default", name));
    }
    set_prefill_attention_kernel(PrefillAttentionKernel::kAuto);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpu, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CudaPreflight, RefusesAHeadDimWithoutAKernel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto cuda = make_cuda_backend(0, DType::kF32);
  EXPECT_NO_THROW(cuda->check_supported({128, 32, 8}));
  try {
    cuda->check_supported({48, 4, 4});
    FAIL() << "head_dim 48 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("head_dim 48"), std::string::npos) << e.what();
  }
}

TEST(CudaVsCpuCheck, APlantedWrongResultIsCaught) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto cuda = make_cuda_backend(0, DType::kF32);
  auto cpu = make_cpu_backend();
  std::vector<float> x(4 * 64), w(64, 1.0f);
  std::mt19937 rng(1);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  Tensor hx = Tensor::from_f32(x, {4, 64}), hw = Tensor::from_f32(w, {64});
  Tensor cpu_out = Tensor::empty({4, 64}, DType::kF32), gpu_out = Tensor::empty({4, 64}, DType::kF32, cuda->allocator());
  cpu->rms_norm(hx, hw, 1e-5f, cpu_out);
  cuda->rms_norm(cuda->upload_weight(hx), cuda->upload_weight(hw), 1e-5f, gpu_out);
  Tensor got = cuda->to_host_f32(gpu_out);
  EXPECT_TRUE(testing::compare(got.data<float>(), cpu_out.data<float>(), 256).within(2e-4, 1e-5));
  got.data<float>()[77] += 0.05f;  // the plant
  EXPECT_FALSE(testing::compare(got.data<float>(), cpu_out.data<float>(), 256).within(2e-4, 1e-5));
}

}  // namespace
}  // namespace tessera::backend
