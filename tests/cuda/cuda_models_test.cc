// End to end on the GPU: the golden checkpoints and stories260K through the
// CUDA backend. In f32 the same bounds as the CPU hold (max |diff| 2e-3,
// relative norm 1e-4) and greedy tokens must equal the fixtures; in bf16 the
// logits must stay within max |diff| 0.25 / relative norm 3e-2 of transformers'
// f32 values (bf16 keeps 8 mantissa bits through every layer). Label: gpu.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "../compare.h"
#include "../model_runner.h"
#include "../test_paths.h"
#include "backend/backend.h"
#include "engine/generate.h"
#include "model/convert/llama2c.h"
#include "model/transformer.h"

namespace tessera {
namespace {

using ::tessera::testing::golden_cases;

class CudaGolden : public ::testing::TestWithParam<std::tuple<std::filesystem::path, DType>> {};

TEST_P(CudaGolden, MatchesTransformers) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto [dir, requested] = GetParam();
  nlohmann::json expected = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
  // bf16 as a user asks for it: a build whose kernels lack bf16 (compute_75 PTX
  // only, the T4 build) falls back to f16, which the same bounds cover.
  const DType dtype = requested == DType::kBF16 ? backend::choose_compute_dtype("bfloat16", Device::cuda(0)) : requested;
  auto backend = backend::make_cuda_backend(0, dtype);
  auto model = model::load_transformer(dir, *backend);
  const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  Tensor logits = testing::prefill_all_logits(*model, prompt);
  const bool exact = dtype == DType::kF32;
  for (size_t i = 0; i < prompt.size(); ++i) {
    std::vector<float> want = expected["logits"][i].get<std::vector<float>>();
    auto c = testing::compare(logits.data<float>() + i * logits.dim(1), want.data(), want.size());
    EXPECT_TRUE(exact ? c.within(2e-3, 1e-4) : c.within(0.25, 3e-2))
        << dir.filename() << " " << dtype_name(dtype) << " position " << i << ": " << c.describe();
  }
  if (!exact && !expected.value("greedy_full_recompute", false) && expected.contains("greedy_margins")) {
    // 16-bit: greedy tokens equal up to the first step whose top-two logits
    // were closer in transformers' f32 run than twice the typical logit error
    // (bf16 0.5, f16 0.1): a near tie 16 bits may break either way.
    const double min_margin = dtype == DType::kBF16 ? 0.5 : 0.1;
    engine::GenerateOptions options;
    options.max_new_tokens = static_cast<int64_t>(expected["greedy_ids"].size());
    options.block_size = 4;
    const auto want = expected["greedy_ids"].get<std::vector<int32_t>>();
    const auto margins = expected["greedy_margins"].get<std::vector<double>>();
    const auto got = engine::generate(*model, prompt, options).tokens;
    for (size_t i = 0; i < want.size() && i < margins.size() && margins[i] >= min_margin; ++i) {
      ASSERT_LT(i, got.size()) << dir.filename() << " " << dtype_name(dtype);
      EXPECT_EQ(got[i], want[i]) << dir.filename() << " " << dtype_name(dtype) << " step " << i << " (margin "
                                 << margins[i] << ")";
      if (got[i] != want[i]) break;
    }
  }
  if (exact && !expected.value("greedy_full_recompute", false)) {
    engine::GenerateOptions options;
    options.max_new_tokens = static_cast<int64_t>(expected["greedy_ids"].size());
    options.block_size = 4;
    EXPECT_EQ(engine::generate(*model, prompt, options).tokens, expected["greedy_ids"].get<std::vector<int32_t>>())
        << dir.filename();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGolden,
                         ::testing::Combine(::testing::ValuesIn(golden_cases()),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param).filename().string() + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

// --quant-policy 8 and 4 end to end: the golden models over a quantized KV
// cache in f32 on the GPU give the CPU's logits over its quantized cache and
// its greedy tokens, through prefill and decode steps (split-K kernel, decode
// graphs). The bound is looser than f32's 2e-3 / 1e-4: the GPU's RoPE is a
// few ulps off the CPU's, which moves the odd value to the next code (a step
// of range / 255 or range / 15). Measured on an H100, either format:
// largest difference 2e-5, relative norm 1e-6 (an earlier 8-bit run: 1.9e-3
// and 3.1e-4).
class CudaGoldenQuantizedKv : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(CudaGoldenQuantizedKv, MatchesTheCpuOverItsQuantizedCache) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const std::filesystem::path dir = GetParam();
  nlohmann::json expected = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
  const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  auto cpu = backend::make_cpu_backend();
  auto gpu = backend::make_cuda_backend(0, DType::kF32);
  for (auto format : {backend::KvCacheFormat::kInt8, backend::KvCacheFormat::kInt4}) {
    const char* name = backend::kv_cache_format_name(format);
    auto cpu_model = model::load_transformer(dir, *cpu);
    auto gpu_model = model::load_transformer(dir, *gpu);
    cpu_model->set_kv_cache_format(format);
    gpu_model->set_kv_cache_format(format);
    Tensor want = testing::prefill_all_logits(*cpu_model, prompt, 4);
    Tensor got = testing::prefill_all_logits(*gpu_model, prompt, 4);
    auto c = testing::compare(got.data<float>(), want.data<float>(), static_cast<size_t>(want.numel()));
    EXPECT_TRUE(c.within(1e-2, 1e-3)) << dir.filename() << " " << name << ": " << c.describe();
    std::cout << dir.filename() << " " << name << ": " << c.describe() << "\n";
    engine::GenerateOptions options;
    options.max_new_tokens = 24;
    options.block_size = 4;
    EXPECT_EQ(engine::generate(*gpu_model, prompt, options).tokens,
              engine::generate(*cpu_model, prompt, options).tokens)
        << dir.filename() << " " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenQuantizedKv, ::testing::ValuesIn(golden_cases()),
                         [](const auto& info) { return info.param.filename().string(); });

TEST(CudaStories260K, GreedyStoryEqualsTheReference) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  TESSERA_REQUIRE_TESTDATA("models/stories260K/stories260K.bin");
  const auto dir = std::filesystem::temp_directory_path() / "tessera-cuda-stories";
  std::filesystem::remove_all(dir);
  model::convert_llama2c_checkpoint(testing::testdata_dir() / "models/stories260K/stories260K.bin", dir);
  auto backend = backend::make_cuda_backend(0, DType::kF32);
  auto model = model::load_transformer(dir, *backend);
  engine::GenerateOptions options;
  options.max_new_tokens = 200;
  auto tokens = engine::generate(*model, {1}, options).tokens;
  auto expected = nlohmann::json::parse(std::ifstream(testing::fixtures_dir() / "stories260k_greedy.json"));
  EXPECT_EQ(tokens, expected["greedy_ids"].get<std::vector<int32_t>>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
