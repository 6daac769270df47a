// Greedy sampling on the GPU: Backend::argmax_rows against the CPU argmax
// (ties to the lowest id, -inf rows, a 92k vocabulary, 256 rows), and the
// engine on golden models with device argmax equal to the engine with host
// logits (TESSERA_GPU_SAMPLING=0). ctest label: gpu.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "../test_paths.h"
#include "backend/backend.h"
#include "engine/cpu_executor.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/transformer.h"

namespace tessera {
namespace {

TEST(CudaSampling, ArgmaxRowsMatchesTheCpuArgmax) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto cuda = backend::make_cuda_backend(0, DType::kF32);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {5, 1000}, {256, 92544}}) {
    std::mt19937 rng(static_cast<uint32_t>(m * 31 + n));
    std::normal_distribution<float> dist(0.0f, 3.0f);
    std::vector<float> values(m * n);
    for (float& v : values) v = std::round(dist(rng) * 4) / 4;  // coarse values: many ties
    if (m > 2) std::fill(values.begin() + n, values.begin() + 2 * n, -INFINITY);  // row 1: all -inf
    Tensor host = Tensor::from_f32(values, {m, n});
    const std::vector<int32_t> got = cuda->argmax_rows(cuda->upload_weight(host));
    ASSERT_EQ(static_cast<int64_t>(got.size()), m);
    int wrong = 0;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t want = engine::argmax(values.data() + i * n, n);
      if (got[i] != want && wrong++ < 5) ADD_FAILURE() << m << "x" << n << " row " << i << ": " << got[i] << " != " << want;
    }
    EXPECT_EQ(wrong, 0);
  }
}

std::vector<std::vector<int32_t>> engine_tokens(model::Transformer& model, bool device_sampling) {
  if (device_sampling) unsetenv("TESSERA_GPU_SAMPLING");
  else setenv("TESSERA_GPU_SAMPLING", "0", 1);
  engine::EngineConfig config;
  config.block_size = 4;
  config.num_blocks = 256;
  config.session_len = 64;
  config.scheduler = {8, 64};
  std::vector<std::vector<int32_t>> all;
  {
    engine::Engine engine(config, std::make_unique<engine::CpuExecutor>(model, config.num_blocks, config.block_size));
    std::vector<std::shared_ptr<engine::RequestStream>> streams;
    for (int i = 0; i < 6; ++i) {
      engine::Request r;
      r.prompt = {1, static_cast<int32_t>(3 + i), static_cast<int32_t>(7 + 2 * i)};
      r.max_tokens = 12;
      r.ignore_eos = true;
      streams.push_back(engine.submit(r));
    }
    for (auto& s : streams) {
      all.emplace_back();
      while (true) {
        engine::TokenEvent e = s->next();
        if (e.has_token()) all.back().push_back(e.token);
        if (e.last()) break;
      }
    }
  }
  unsetenv("TESSERA_GPU_SAMPLING");
  return all;
}

TEST(CudaSampling, EngineWithDeviceArgmaxEqualsHostLogits) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (const auto& dir : testing::golden_cases()) {
    auto cuda = backend::make_cuda_backend(0, DType::kF32);
    auto model = model::load_transformer(dir, *cuda);
    EXPECT_EQ(engine_tokens(*model, true), engine_tokens(*model, false)) << dir.filename();
  }
}

}  // namespace
}  // namespace tessera
