// The tensor-core prefill attention against the CPU kernel (the judge), through
// the Backend interface, over a grid: head_dim 64/128, GQA ratios 1/4/8,
// sequences of 1, 63, 64, 65 and 1000 new tokens, chunks that start after
// cached tokens, decode rows in a prefill step, a sliding window, several
// sequences a batch and shuffled blocks, in f16 and bf16. The kernel is forced
// (PrefillAttentionKernel::kTensorCore), so a silent fall back to the scalar
// kernel fails instead of passing. Skips without a GPU of compute capability
// 8.0 and an image built for it. ctest label: gpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "../compare.h"
#include "backend/backend.h"
#include "backend/cuda/prefill_sm90.h"
#include "core/error.h"

namespace tessera::backend {
namespace {

struct Bounds {
  double max_abs, rel_norm;
};

// As tests/cuda/cuda_ops_test.cc: the outputs are rounded to the dtype, and P
// is rounded to it before P·V (the CPU keeps both in f32).
Bounds bounds_for(DType dtype) { return dtype == DType::kF16 ? Bounds{2e-2, 2e-3} : Bounds{1e-1, 1e-2}; }

struct Sequence {
  int32_t context;     // tokens in the cache after the step
  int32_t new_tokens;  // of which new this step (the chunk [context - new_tokens, context))
};

struct Case {
  int64_t head_dim, kv_heads, group, block_size, window;
  std::vector<Sequence> seqs;
};

std::string describe(const Case& c) {
  std::string s = "hd" + std::to_string(c.head_dim) + " heads " + std::to_string(c.kv_heads * c.group) + "/" +
                  std::to_string(c.kv_heads) + " block " + std::to_string(c.block_size) + " window " +
                  std::to_string(c.window) + " seqs";
  for (const Sequence& q : c.seqs) s += " " + std::to_string(q.context - q.new_tokens) + "+" + std::to_string(q.new_tokens);
  return s;
}

// The grid of cases for the head dims given; windowed cases only `with_window`.
std::vector<Case> grid_cases(std::vector<int64_t> head_dims, bool with_window) {
  std::vector<Case> cases;
  for (int64_t head_dim : head_dims) {
    for (int64_t group : {1, 4, 8}) {
      const int64_t block = head_dim == 64 ? 16 : 64;
      // whole prompts of the lengths around a tile (one step: the 1-token one rides with the others)
      cases.push_back({head_dim, 2, group, block, 0, {{1, 1}, {63, 63}, {64, 64}, {65, 65}}});
      cases.push_back({head_dim, 2, group, block, 0, {{1000, 1000}}});
      // chunked prefill: chunks after cached tokens, a decode row, a 1-token chunk
      cases.push_back({head_dim, 2, group, block, 0, {{1000, 200}, {130, 65}, {70, 1}, {5, 2}, {501, 1}}});
    }
    // a sliding window, an odd block size, eight KV heads as in the 7B model
    if (with_window) cases.push_back({head_dim, 2, 4, 8, 100, {{300, 300}, {250, 70}, {90, 1}}});
    cases.push_back({head_dim, 2, 4, 8, 0, {{300, 300}, {250, 70}, {90, 1}}});
    cases.push_back({head_dim, 8, 4, 64, 0, {{257, 257}, {64, 3}}});
  }
  return cases;
}

class PrefillAttention : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    const CudaDeviceInfo info = cuda_device_info(0);
    if (info.effective_capability() < 80) {
      GTEST_SKIP() << "the tensor-core kernel needs compute capability 8.0; kernels loaded as "
                   << info.describe_image() << " on " << info.name;
    }
    start(GetParam(), PrefillAttentionKernel::kTensorCore);
  }
  void start(DType dtype, PrefillAttentionKernel kernel) {
    dtype_ = dtype;
    cuda_ = make_cuda_backend(0, dtype_);
    cpu_ = make_cpu_backend();
    set_prefill_attention_kernel(kernel);
  }
  void TearDown() override { set_prefill_attention_kernel(PrefillAttentionKernel::kAuto); }

  Tensor random(Shape shape, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> values(shape_numel(shape));
    for (float& v : values) v = dist(rng);
    return Tensor::from_f32(values, shape).to_dtype(dtype_).to_f32();
  }

  struct Outputs {
    Tensor gpu, cpu;  // host f32 [n, heads * head_dim]
  };

  // Runs both backends on one case. `cpu_position_shift` moves the CPU's
  // positions (and so its causal mask) by that many keys: the planted bug.
  Outputs run(const Case& c, int32_t cpu_position_shift = 0) {
    const int64_t heads = c.kv_heads * c.group, d = c.head_dim;
    AttentionBatch batch;
    batch.sliding_window = c.window;
    int32_t max_blocks = 0;
    for (const Sequence& s : c.seqs) {
      max_blocks = std::max<int32_t>(max_blocks, (s.context + 1 + c.block_size - 1) / c.block_size);
    }
    const int64_t seqs = static_cast<int64_t>(c.seqs.size()), num_blocks = seqs * max_blocks;
    batch.max_blocks_per_seq = max_blocks;
    batch.block_tables.resize(num_blocks);
    std::iota(batch.block_tables.begin(), batch.block_tables.end(), 0);
    std::shuffle(batch.block_tables.begin(), batch.block_tables.end(), std::mt19937(7));
    batch.query_start = {0};
    for (const Sequence& s : c.seqs) {
      for (int32_t p = s.context - s.new_tokens; p < s.context; ++p) batch.positions.push_back(p);
      batch.query_start.push_back(static_cast<int32_t>(batch.positions.size()));
    }
    const int64_t n = batch.num_tokens();
    const Shape cache_shape = {num_blocks, c.kv_heads, c.block_size, d};
    // The whole cache is random: what a step wrote and what earlier steps did look the same.
    Tensor keys = random(cache_shape, 11, 1.0f), values = random(cache_shape, 12, 1.0f);
    // q scaled up so the softmax is peaked and the running maximum moves.
    Tensor qkv = random({n, (heads + 2 * c.kv_heads) * d}, 13, 3.0f);
    PagedKvLayer cpu_cache{keys, values}, gpu_cache{cuda_->upload_weight(keys), cuda_->upload_weight(values)};

    Tensor gpu_out = Tensor::empty({n, heads * d}, dtype_, cuda_->allocator());
    cuda_->prepare(batch);
    cuda_->paged_attention(cuda_->upload_weight(qkv), heads, batch, gpu_cache, c.block_size, gpu_out);

    AttentionBatch cpu_batch = batch;
    for (int32_t& p : cpu_batch.positions) p += cpu_position_shift;
    Tensor cpu_out = Tensor::empty({n, heads * d}, DType::kF32);
    cpu_->prepare(cpu_batch);
    cpu_->paged_attention(qkv, heads, cpu_batch, cpu_cache, c.block_size, cpu_out);
    return {cuda_->to_host_f32(gpu_out), cpu_out};
  }

  void expect_grid_matches(const std::vector<Case>& cases) {
    const Bounds b = bounds_for(dtype_);
    for (const Case& c : cases) {
      Outputs out = run(c);
      ASSERT_EQ(out.gpu.shape(), out.cpu.shape());
      auto cmp = testing::compare(out.gpu.data<float>(), out.cpu.data<float>(), static_cast<size_t>(out.cpu.numel()));
      EXPECT_TRUE(cmp.within(b.max_abs, b.rel_norm)) << describe(c) << " (" << dtype_name(dtype_) << "): " << cmp.describe();
    }
  }

  // The comparison is able to fail: a causal mask one key off (the CPU judging
  // with every position moved by one) is caught on a case of short sequences.
  void expect_shifted_mask_caught(int64_t block_size) {
    const Case c{128, 2, 4, block_size, 0, {{65, 65}, {40, 33}}};
    const Bounds b = bounds_for(dtype_);
    Outputs right = run(c);
    auto ok = testing::compare(right.gpu.data<float>(), right.cpu.data<float>(), static_cast<size_t>(right.cpu.numel()));
    EXPECT_TRUE(ok.within(b.max_abs, b.rel_norm)) << ok.describe();
    Outputs planted = run(c, 1);
    auto bad = testing::compare(planted.gpu.data<float>(), planted.cpu.data<float>(),
                                static_cast<size_t>(planted.cpu.numel()));
    EXPECT_FALSE(bad.within(b.max_abs, b.rel_norm)) << "a mask one key off went unnoticed: " << bad.describe();
  }

  DType dtype_ = DType::kBF16;
  std::unique_ptr<Backend> cuda_, cpu_;
};

TEST_P(PrefillAttention, MatchesTheCpuKernelOverTheGrid) { expect_grid_matches(grid_cases({64, 128}, true)); }

TEST_P(PrefillAttention, AMaskOneKeyOffIsCaught) { expect_shifted_mask_caught(16); }

INSTANTIATE_TEST_SUITE_P(Dtypes, PrefillAttention, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// FlashInfer's sm_90a kernel, forced, on the cases it covers (bf16, head_dim
// 128, no window), and on prompts spanning many of its 128-row query tiles
// and several thread blocks' work lists. Skips unless the device has compute
// capability 9.0 and the build holds the kernel.
class PrefillAttentionSm90 : public PrefillAttention {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    const CudaDeviceInfo info = cuda_device_info(0);
    if (info.device_capability() != 90) GTEST_SKIP() << "sm_90a code runs on compute capability 9.0 only: " << info.name;
    if (!cuda::sm90_prefill_built()) GTEST_SKIP() << "this build holds no FlashInfer kernel";
    start(DType::kBF16, PrefillAttentionKernel::kFlashInfer);
  }
};

TEST_P(PrefillAttentionSm90, MatchesTheCpuKernelOverTheGrid) {
  std::vector<Case> cases = grid_cases({128}, false);
  cases.push_back({128, 8, 4, 64, 0, {{2049, 2049}, {700, 300}, {129, 128}, {2, 1}}});
  expect_grid_matches(cases);
}

TEST_P(PrefillAttentionSm90, AMaskOneKeyOffIsCaught) { expect_shifted_mask_caught(16); }

INSTANTIATE_TEST_SUITE_P(Bf16, PrefillAttentionSm90, ::testing::Values(DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Forcing `kernel` on a backend computing in `dtype` at `head_dim`, where it
// cannot run, throws kUnsupported with a message containing `word`, and kAuto
// then runs. The switch is back at kAuto afterwards either way.
void expect_forced_kernel_refused(DType dtype, int64_t head_dim, PrefillAttentionKernel kernel,
                                  const std::string& word) {
  auto cuda = make_cuda_backend(0, dtype);
  AttentionBatch batch;
  batch.positions = {0, 1};
  batch.query_start = {0, 2};
  batch.block_tables = {0};
  batch.max_blocks_per_seq = 1;
  auto zeros = [&](Shape shape) {
    return cuda->upload_weight(Tensor::from_f32(std::vector<float>(shape_numel(shape)), shape).to_dtype(dtype));
  };
  PagedKvLayer cache{zeros({1, 1, 16, head_dim}), zeros({1, 1, 16, head_dim})};
  Tensor qkv = zeros({2, 3 * head_dim});
  Tensor out = Tensor::empty({2, head_dim}, dtype, cuda->allocator());
  cuda->prepare(batch);
  set_prefill_attention_kernel(kernel);
  try {
    cuda->paged_attention(qkv, 1, batch, cache, 16, out);
    set_prefill_attention_kernel(PrefillAttentionKernel::kAuto);
    FAIL() << "the forced kernel ran where it cannot (" << word << ")";
  } catch (const Error& e) {
    set_prefill_attention_kernel(PrefillAttentionKernel::kAuto);
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(e.message().find(word), std::string::npos) << e.message();
  }
  EXPECT_NO_THROW(cuda->paged_attention(qkv, 1, batch, cache, 16, out));
  cuda->synchronize();
}

// Forcing FlashInfer's kernel where it cannot run (f16 here; or a device not
// 9.0, or a build without it) is refused, not silently replaced.
TEST(PrefillAttentionChoice, ForcedFlashInferInF16IsRefused) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  if (cuda_device_info(0).effective_capability() < 75) GTEST_SKIP() << "no kernel image for this device";
  expect_forced_kernel_refused(DType::kF16, 128, PrefillAttentionKernel::kFlashInfer, "FlashInfer");
}

// Forcing the tensor-core kernel where it cannot run (f32) is refused, not
// silently replaced; kAuto there runs the scalar kernel.
TEST(PrefillAttentionChoice, ForcedTensorCoresInF32AreRefused) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  expect_forced_kernel_refused(DType::kF32, 64, PrefillAttentionKernel::kTensorCore, "f32");
}

}  // namespace
}  // namespace tessera::backend
