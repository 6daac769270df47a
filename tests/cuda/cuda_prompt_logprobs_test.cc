// Prompt logprobs (echo with logprobs) on the GPU: the engine's scoring path
// (every prompt row's logits, 64 rows a step shared by the scoring requests,
// log-softmax on the host) over the CUDA backend in f32, against transformers
// with the CPU test's bounds (tests/engine/prompt_scoring.h). Label: gpu.
#include <gtest/gtest.h>

#include "../engine/prompt_scoring.h"
#include "../test_paths.h"
#include "backend/backend.h"
#include "model/transformer.h"

namespace tessera {
namespace {

class CudaPromptLogprobs : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(CudaPromptLogprobs, EqualTransformersLogSoftmaxOnceEach) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const std::filesystem::path dir = GetParam();
  if (dir.filename() == "llama_rope_dynamic") {
    GTEST_SKIP() << "dynamic NTK: chunked scores differ from transformers' one forward by design";
  }
  auto backend = backend::make_cuda_backend(0, DType::kF32);
  auto model = model::load_transformer(dir, *backend);
  engine::scoring::expect_prompt_scores_match(*model, dir, dir.filename().string() + " on cuda:0");
}

INSTANTIATE_TEST_SUITE_P(Golden, CudaPromptLogprobs, ::testing::ValuesIn(testing::golden_cases()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace tessera
