// Sampling on the GPU: Backend::sample_rows against engine::Sampler, its
// reference — argmax at temperature 0 (ties to the lowest id, -inf rows),
// and at temperature > 0 the same token from the same uniform number over a
// grid of vocabularies (up to 151,936), truncations, penalties, logit_bias,
// masks, tie-heavy rows and flat rows; a shifted uniform shows the
// comparison failing.
// Then the engine on golden models sampling on the device equals the engine
// sampling host logits (TESSERA_GPU_SAMPLING=0), greedy and seeded. ctest
// label: gpu.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "../test_paths.h"
#include "engine_tokens.h"
#include "backend/backend.h"
#include "engine/cpu_executor.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/transformer.h"

namespace tessera {
namespace {

// Random logits [m, n]: N(0, sigma), or rounded to quarters (many ties) on odd rows.
std::vector<float> random_logits(int64_t m, int64_t n, uint32_t seed, float sigma = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> values(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float v = dist(rng);
      values[i * n + j] = i % 2 == 1 ? std::round(v * 4) / 4 : v;
    }
  }
  return values;
}

TEST(CudaSampling, TemperatureZeroIsTheHostArgmax) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto cuda = backend::make_cuda_backend(0, DType::kF32);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {5, 1000}, {256, 92544}}) {
    std::vector<float> values = random_logits(m, n, static_cast<uint32_t>(m * 31 + n));
    for (float& v : values) v = std::round(v * 4) / 4;  // coarse values: many ties
    if (m > 2) std::fill(values.begin() + n, values.begin() + 2 * n, -INFINITY);  // row 1: all -inf
    Tensor logits = cuda->upload_weight(Tensor::from_f32(values, {m, n}));
    backend::SamplingBatch batch;
    batch.rows.resize(m);
    const std::vector<int32_t> got = cuda->sample_rows(logits, batch);
    ASSERT_EQ(static_cast<int64_t>(got.size()), m);
    int wrong = 0;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t want = engine::argmax(values.data() + i * n, n);
      if (got[i] != want && wrong++ < 5) ADD_FAILURE() << m << "x" << n << " row " << i << ": " << got[i] << " != " << want;
    }
    EXPECT_EQ(wrong, 0);
  }
}

struct Case {
  engine::SamplingParams params;
  std::vector<int32_t> prompt, output, masked;
  std::vector<uint64_t> allowed;  // a structured output's ids, or empty
};

// Row i's parameters: temperatures, truncations and penalties in turn.
Case make_case(int64_t i, int64_t n, std::mt19937& rng) {
  static const float temperatures[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.6f};
  static const int32_t top_ks[] = {0, 1, 5, 40, 1000, 1 << 30};
  static const float top_ps[] = {1.0f, 0.95f, 0.8f, 0.3f, 0.01f, 1.0f, 0.999f};
  static const float min_ps[] = {0.0f, 0.0f, 0.05f, 0.5f};
  Case c;
  engine::SamplingParams& p = c.params;
  p.seed = static_cast<uint64_t>(i) * 7919 + 1;
  p.temperature = temperatures[i % 5];
  p.top_k = top_ks[(i / 5) % 6];
  p.top_p = top_ps[(i / 3) % 7];
  p.min_p = min_ps[(i / 7) % 4];
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(n - 1));
  if (i % 4 == 1) {
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    for (int k = 0; k < 20; ++k) c.prompt.push_back(id(rng));
    for (int k = 0; k < 12; ++k) c.output.push_back(id(rng) % 8);  // repeats: counts above 1
  }
  if (i % 6 == 2) p.logit_bias = {{id(rng), 5.0f}, {static_cast<int32_t>(n - 1), -100.0f}};
  if (i % 5 == 3) c.masked = {0, id(rng)};
  if (i % 9 == 4 || i % 9 == 7) {  // a structured output: three ids, or about half of them
    c.allowed.assign(static_cast<size_t>((n + 63) / 64), 0);
    const auto allow = [&](int32_t t) { c.allowed[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64); };
    if (i % 9 == 4) {
      for (int k = 0; k < 3; ++k) allow(id(rng));
    } else {
      for (int32_t t = 0; t < n; ++t) {
        if (rng() % 2 == 0) allow(t);
      }
    }
  }
  return c;
}

// Rows sampled on the device at each Sampler's own uniform number (or, with
// `shift`, at that number moved by a third) against the Sampler on the host;
// without `device_masks` the device is not given the structured outputs' ids.
int64_t mismatches(backend::Backend& cuda, int64_t m, int64_t n, double shift, int64_t* drawn, float sigma = 3.0f,
                   bool device_masks = true) {
  std::vector<float> values = random_logits(m, n, static_cast<uint32_t>(n), sigma);
  if (m > 4) std::fill(values.begin() + 4 * n, values.begin() + 5 * n, -INFINITY);  // row 4: all -inf
  if (m > 6) {  // row 6: one finite logit
    std::fill(values.begin() + 6 * n, values.begin() + 7 * n, -INFINITY);
    values[6 * n + n / 2] = 1.0f;
  }
  std::mt19937 rng(static_cast<uint32_t>(m + n));
  backend::SamplingBatch batch;
  std::vector<int32_t> want;
  for (int64_t i = 0; i < m; ++i) {
    const Case c = make_case(i, n, rng);
    engine::Sampler host(c.params), device(c.params);
    engine::SampleInputs inputs{c.prompt, c.output, c.masked};
    inputs.allowed = c.allowed;
    want.push_back(host.sample({values.data() + i * n, static_cast<size_t>(n)}, inputs).token);
    for (const backend::LogitEdit& e : engine::logit_edits(c.params, inputs, n, static_cast<int32_t>(i))) {
      batch.edits.push_back(e);
    }
    if (!c.allowed.empty() && device_masks) {
      batch.allowed_rows.push_back(static_cast<int32_t>(i));
      batch.allowed.insert(batch.allowed.end(), c.allowed.begin(), c.allowed.end());
    }
    backend::SamplingRow row{c.params.temperature, c.params.top_k, c.params.top_p, c.params.min_p, 0.0};
    if (c.params.temperature > 0.0f) row.uniform = std::fmod(device.next_uniform() + shift, 1.0);
    batch.rows.push_back(row);
  }
  Tensor logits = cuda.upload_weight(Tensor::from_f32(values, {m, n}));
  const std::vector<int32_t> got = cuda.sample_rows(logits, batch);
  EXPECT_EQ(static_cast<int64_t>(got.size()), m);
  int64_t wrong = 0;
  *drawn = 0;
  for (int64_t i = 0; i < m; ++i) {
    *drawn += batch.rows[i].temperature > 0.0f ? 1 : 0;
    if (got[i] != want[i] && shift == 0.0 && device_masks && wrong < 5) {
      ADD_FAILURE() << m << "x" << n << " row " << i << " (T " << batch.rows[i].temperature << ", top_k "
                    << batch.rows[i].top_k << ", top_p " << batch.rows[i].top_p << ", min_p " << batch.rows[i].min_p
                    << "): device " << got[i] << ", host " << want[i];
    }
    wrong += got[i] != want[i] ? 1 : 0;
  }
  return wrong;
}

TEST(CudaSampling, SampleRowsEqualsTheHostSamplerAtTheSameUniform) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto cuda = backend::make_cuda_backend(0, DType::kF32);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 2}, {64, 37}, {420, 1000}, {420, 32000},
                      {210, 92544}, {70, 151936}}) {
    int64_t drawn = 0;
    EXPECT_EQ(mismatches(*cuda, m, n, 0.0, &drawn), 0) << m << "x" << n;
  }
}

// Flat rows (N(0, 0.05) and N(0, 1) logits): top_p keeps tens of thousands
// of tokens, past what the fast path gathers, so rows take the whole-row
// path, where top_p's descent by weight also gives the K-th token.
TEST(CudaSampling, FlatRowsEqualTheHostSamplerAtTheSameUniform) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto cuda = backend::make_cuda_backend(0, DType::kF32);
  for (float sigma : {0.05f, 1.0f}) {
    int64_t drawn = 0;
    EXPECT_EQ(mismatches(*cuda, 210, 92544, 0.0, &drawn, sigma), 0) << "sigma " << sigma;
  }
}

TEST(CudaSampling, ADifferentUniformIsCaught) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto cuda = backend::make_cuda_backend(0, DType::kF32);
  int64_t drawn = 0;
  const int64_t wrong = mismatches(*cuda, 420, 1000, 1.0 / 3.0, &drawn);
  // Rows truncated to one token, or with one token left, draw the same at any uniform.
  EXPECT_GT(wrong, drawn / 10) << wrong << " of " << drawn << " drawn rows differ";
}

TEST(CudaSampling, AMissingStructuredOutputMaskIsCaught) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto cuda = backend::make_cuda_backend(0, DType::kF32);
  int64_t drawn = 0;
  // 420 rows: 93 of them masked, a third of those to three ids.
  EXPECT_GT(mismatches(*cuda, 420, 32000, 0.0, &drawn, 3.0f, /*device_masks=*/false), 40);
}

TEST(CudaSampling, EngineSamplingOnTheDeviceEqualsHostLogits) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (const auto& dir : testing::golden_cases()) {
    auto cuda = backend::make_cuda_backend(0, DType::kF32);
    auto model = model::load_transformer(dir, *cuda);
    auto executor = [&](int64_t num_blocks, int64_t block_size) {
      return std::make_unique<engine::CpuExecutor>(*model, num_blocks, block_size);
    };
    const testing::EngineTokens on_device = testing::engine_tokens(executor, true);
    const testing::EngineTokens on_host = testing::engine_tokens(executor, false);
    EXPECT_TRUE(on_device.sampled_on_device && !on_host.sampled_on_device) << dir.filename();
    EXPECT_EQ(on_device.tokens, on_host.tokens) << dir.filename();
  }
}

}  // namespace
}  // namespace tessera
