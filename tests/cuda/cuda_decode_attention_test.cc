// Split-K decode attention (decode_attention.cu) against the CPU kernel: steps
// of decode tokens only over a grid of context lengths (1, block boundaries,
// past 4096), mixed lengths in one batch, head dims 64..256, GQA groups of 1,
// 4, 7 and 16 query heads (groups over 8 take several thread blocks), sliding
// windows; through Backend::paged_attention (the plan the backend picks) and
// through the launcher with forced splits, including splits that cover no key
// at all (what a CUDA graph captured for longer contexts launches); with RoPE
// inside the kernel against the CPU's RoPE and cache write. A planted wrong
// value must be caught. ctest label: gpu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "../attention_batch.h"
#include "../compare.h"
#include "backend/backend.h"
#include "backend/cuda/kernels.h"

namespace tessera::backend {
namespace {

struct Case {
  int64_t heads, kv_heads, head_dim, block_size, window;
  std::vector<int32_t> context_lens;  // tokens in the cache, the last one this step's
};

bool close_enough(const testing::Closeness& c, DType dtype) {
  switch (dtype) {
    case DType::kF32: return c.within(2e-4, 1e-5);
    case DType::kF16: return c.within(2e-2, 2e-3);
    default: return c.within(1e-1, 1e-2);
  }
}

class CudaDecodeAttention : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    dtype_ = GetParam();
    cuda_ = make_cuda_backend(0, dtype_);
    cpu_ = make_cpu_backend();
  }

  Tensor random(Shape shape, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(shape_numel(shape));
    for (float& v : values) v = dist(rng);
    return Tensor::from_f32(values, shape).to_dtype(dtype_).to_f32();
  }

  struct Setup {
    AttentionBatch batch;
    Tensor qkv, keys, values;  // host f32, rounded to the dtype
    Tensor expected;           // CPU attention [seqs, heads * head_dim]
  };

  Setup make(const Case& c, uint32_t seed) {
    Setup s;
    const int64_t seqs = static_cast<int64_t>(c.context_lens.size());
    s.batch = testing::shuffled_attention_batch(c.context_lens, std::vector<int32_t>(seqs, 1), c.block_size, c.window,
                                                seed);
    AttentionBatch& b = s.batch;
    const int64_t max_blocks = b.max_blocks_per_seq;
    const Shape cache_shape = {seqs * max_blocks, c.kv_heads, c.block_size, c.head_dim};
    s.keys = random(cache_shape, seed + 1);
    s.values = random(cache_shape, seed + 2);
    s.qkv = random({seqs, (c.heads + 2 * c.kv_heads) * c.head_dim}, seed + 3);
    s.expected = Tensor::empty({seqs, c.heads * c.head_dim}, DType::kF32);
    PagedKvLayer cache{s.keys, s.values};
    cpu_->prepare(b);
    cpu_->paged_attention(s.qkv, c.heads, b, cache, c.block_size, s.expected);
    return s;
  }

  std::string name(const Case& c) const {
    std::string lens;
    for (int32_t len : c.context_lens) {
      if (!lens.empty()) lens += ',';
      lens += std::to_string(len);
    }
    return fmt::format("hd{} {}/{} block {} window {} lens [{}] {}", c.head_dim, c.heads, c.kv_heads, c.block_size,
                       c.window, lens, dtype_name(dtype_));
  }

  DType dtype_ = DType::kF32;
  std::unique_ptr<Backend> cuda_, cpu_;
};

const std::vector<Case> kCases = {
    {4, 4, 64, 16, 0, {1}},
    {8, 2, 128, 64, 0, {1, 63, 64, 65, 128, 129}},
    {32, 8, 128, 64, 0, {4097}},
    {32, 8, 128, 64, 0, {4096, 1, 300, 2000, 64}},
    {28, 4, 128, 16, 0, {17, 700, 33}},  // a group of 7
    {16, 1, 64, 32, 0, {90, 1025}},      // a group of 16: two thread blocks per KV head
    {8, 8, 256, 16, 0, {5, 513}},
    {4, 2, 96, 32, 0, {97, 3}},
    {2, 1, 32, 8, 0, {40}},
    {8, 4, 8, 16, 0, {21, 3}},
    {8, 2, 128, 16, 100, {1000, 50, 101}},  // sliding window
    {4, 1, 64, 64, 7, {8, 1}},
};

TEST_P(CudaDecodeAttention, BackendMatchesTheCpuKernel) {
  uint32_t seed = 10;
  for (const Case& c : kCases) {
    Setup s = make(c, seed += 10);
    PagedKvLayer gpu_cache{cuda_->upload_weight(s.keys), cuda_->upload_weight(s.values)};
    Tensor gpu_qkv = cuda_->upload_weight(s.qkv);
    Tensor out = Tensor::empty(s.expected.shape(), dtype_, cuda_->allocator());
    cuda_->prepare(s.batch);
    cuda_->paged_attention(gpu_qkv, c.heads, s.batch, gpu_cache, c.block_size, out);
    Tensor got = cuda_->to_host_f32(out);
    auto cmp = testing::compare(got.data<float>(), s.expected.data<float>(), static_cast<size_t>(got.numel()));
    EXPECT_TRUE(close_enough(cmp, dtype_)) << name(c) << ": " << cmp.describe();
  }
}

template <typename T>
void launch(const void* qkv, const int32_t* positions, const int32_t* tables, const AttentionBatch& b, const Case& c,
            cuda::DecodeSplits splits, void* k, void* v, float* partial, int32_t* arrivals, void* out) {
  cuda::launch_decode_attention<T>(static_cast<const T*>(qkv), positions, tables, b.max_blocks_per_seq, b.num_seqs(),
                                   c.heads, c.kv_heads, c.head_dim, c.block_size, c.window, splits,
                                   static_cast<T*>(k), static_cast<T*>(v), partial, arrivals, static_cast<T*>(out),
                                   nullptr);
}

TEST_P(CudaDecodeAttention, ForcedSplitsIncludingEmptyOnesMatchTheCpuKernel) {
  const std::vector<Case> cases = {kCases[1], kCases[3], kCases[5], kCases[10]};
  uint32_t seed = 500;
  for (const Case& c : cases) {
    Setup s = make(c, seed += 10);
    const int32_t longest = *std::max_element(c.context_lens.begin(), c.context_lens.end());
    Tensor k = cuda_->upload_weight(s.keys), v = cuda_->upload_weight(s.values), qkv = cuda_->upload_weight(s.qkv);
    const AttentionBatch& b = s.batch;
    int32_t* positions = nullptr;
    int32_t* tables = nullptr;
    ASSERT_EQ(cudaMalloc(&positions, b.positions.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&tables, b.block_tables.size() * 4), cudaSuccess);
    cudaMemcpy(positions, b.positions.data(), b.positions.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(tables, b.block_tables.data(), b.block_tables.size() * 4, cudaMemcpyHostToDevice);
    // One split covering everything (direct output), and as many splits as a
    // launch may have (pieces of 32 positions, most of them empty for the
    // shorter sequences), launched twice on the same arrival counters: the
    // second launch finds them zeroed by the first.
    for (cuda::DecodeSplits splits : {cuda::DecodeSplits{longest, 1}, cuda::DecodeSplits{32, 128}}) {
      float* partial = nullptr;
      int32_t* arrivals = nullptr;
      const size_t floats = b.num_seqs() * c.heads * splits.num_splits * (c.head_dim + 1);
      const size_t counters = static_cast<size_t>(cuda::decode_arrival_counters(b.num_seqs(), c.heads, c.kv_heads));
      ASSERT_EQ(cudaMalloc(&partial, floats * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&arrivals, counters * 4), cudaSuccess);
      ASSERT_EQ(cudaMemset(arrivals, 0, counters * 4), cudaSuccess);
      for (int launch_index = 0; launch_index < 2; ++launch_index) {
        Tensor out = Tensor::empty(s.expected.shape(), dtype_, cuda_->allocator());
        cuda_->synchronize();
        if (dtype_ == DType::kF32) launch<float>(qkv.raw_data(), positions, tables, b, c, splits, k.raw_data(), v.raw_data(), partial, arrivals, out.raw_data());
        if (dtype_ == DType::kF16) launch<__half>(qkv.raw_data(), positions, tables, b, c, splits, k.raw_data(), v.raw_data(), partial, arrivals, out.raw_data());
        if (dtype_ == DType::kBF16) launch<__nv_bfloat16>(qkv.raw_data(), positions, tables, b, c, splits, k.raw_data(), v.raw_data(), partial, arrivals, out.raw_data());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        Tensor got = cuda_->to_host_f32(out);
        auto cmp = testing::compare(got.data<float>(), s.expected.data<float>(), static_cast<size_t>(got.numel()));
        EXPECT_TRUE(close_enough(cmp, dtype_)) << name(c) << " splits " << splits.num_splits << ", launch "
                                               << launch_index << ": " << cmp.describe();
      }
      std::vector<int32_t> left(counters, -1);
      cudaMemcpy(left.data(), arrivals, counters * 4, cudaMemcpyDeviceToHost);
      EXPECT_EQ(std::count(left.begin(), left.end(), 0), static_cast<std::ptrdiff_t>(counters))
          << name(c) << ": arrival counters left non-zero";
      cudaFree(partial);
      cudaFree(arrivals);
    }
    cudaFree(positions);
    cudaFree(tables);
  }
}

Tensor copy_of(const Tensor& host) {
  return Tensor::from_f32(std::vector<float>(host.data<float>(), host.data<float>() + host.numel()), host.shape());
}

// Backend::rope_attention (RoPE inside the split-K kernel on the GPU) against
// the CPU's rope_and_cache_write + paged_attention: the output, and both
// caches (the new tokens' rotated k and their v written, nothing else moved),
// with per-sequence frequencies (dynamic NTK gives each its own) and an
// attention scaling.
TEST_P(CudaDecodeAttention, RopeInsideTheKernelMatchesTheCpuOps) {
  uint32_t seed = 700;
  int index = 0;
  for (const Case& c : kCases) {
    Setup s = make(c, seed += 10);
    const int64_t seqs = s.batch.num_seqs(), half = c.head_dim / 2;
    std::vector<float> inv_freq(seqs * half);
    for (int64_t q = 0; q < seqs; ++q) {
      for (int64_t i = 0; i < half; ++i) {
        inv_freq[q * half + i] = std::pow(10000.0f * (1.0f + 0.5f * q), -2.0f * i / c.head_dim);
      }
    }
    const float scaling = index++ % 3 == 2 ? 1.2f : 1.0f;
    Tensor cpu_qkv = copy_of(s.qkv), cpu_keys = copy_of(s.keys), cpu_values = copy_of(s.values);
    PagedKvLayer cpu_cache{cpu_keys, cpu_values};
    Tensor expected = Tensor::empty(s.expected.shape(), DType::kF32);
    cpu_->prepare(s.batch);
    cpu_->rope_and_cache_write(cpu_qkv, c.heads, inv_freq, scaling, s.batch, cpu_cache, c.block_size);
    cpu_->paged_attention(cpu_qkv, c.heads, s.batch, cpu_cache, c.block_size, expected);

    PagedKvLayer gpu_cache{cuda_->upload_weight(s.keys), cuda_->upload_weight(s.values)};
    Tensor gpu_qkv = cuda_->upload_weight(s.qkv);
    Tensor out = Tensor::empty(s.expected.shape(), dtype_, cuda_->allocator());
    cuda_->prepare(s.batch);
    cuda_->rope_attention(gpu_qkv, c.heads, inv_freq, scaling, s.batch, gpu_cache, c.block_size, out);
    const std::pair<Tensor, const Tensor*> results[] = {{cuda_->to_host_f32(out), &expected},
                                                        {cuda_->to_host_f32(gpu_cache.keys), &cpu_keys},
                                                        {cuda_->to_host_f32(gpu_cache.values), &cpu_values}};
    const char* what[] = {"output", "keys", "values"};
    for (int r = 0; r < 3; ++r) {
      const Tensor& got = results[r].first;
      auto cmp = testing::compare(got.data<float>(), results[r].second->data<float>(), static_cast<size_t>(got.numel()));
      EXPECT_TRUE(close_enough(cmp, dtype_)) << name(c) << " " << what[r] << ": " << cmp.describe();
    }
  }
}

TEST_P(CudaDecodeAttention, APlantedWrongResultIsCaught) {
  Setup s = make(kCases[1], 99);
  PagedKvLayer gpu_cache{cuda_->upload_weight(s.keys), cuda_->upload_weight(s.values)};
  Tensor out = Tensor::empty(s.expected.shape(), dtype_, cuda_->allocator());
  cuda_->prepare(s.batch);
  cuda_->paged_attention(cuda_->upload_weight(s.qkv), kCases[1].heads, s.batch, gpu_cache, kCases[1].block_size, out);
  Tensor got = cuda_->to_host_f32(out);
  const size_t count = static_cast<size_t>(got.numel());
  EXPECT_TRUE(close_enough(testing::compare(got.data<float>(), s.expected.data<float>(), count), dtype_));
  got.data<float>()[count / 2] += 0.2f;  // the plant
  EXPECT_FALSE(close_enough(testing::compare(got.data<float>(), s.expected.data<float>(), count), dtype_));
}

TEST(CudaDecodeSplits, CoverTheLongestContextAndFillTheGpu) {
  for (int64_t seqs : {1, 4, 64, 256})
    for (int64_t context : {1, 64, 65, 4096, 32768}) {
      const cuda::DecodeSplits p = cuda::plan_decode_splits(seqs, 32, 8, context, 132);
      EXPECT_GE(p.num_splits * p.tokens_per_split, context) << seqs << " seqs, context " << context;
      EXPECT_LT((p.num_splits - 1) * p.tokens_per_split, context) << "an empty split planned";
      if (seqs * 8 >= 264) {
        EXPECT_EQ(p.num_splits, 1) << "a full batch needs no split";
      }
    }
  EXPECT_GE(cuda::plan_decode_splits(1, 32, 8, 4096, 132).num_splits, 16);  // one long sequence fills the GPU
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaDecodeAttention, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tessera::backend
