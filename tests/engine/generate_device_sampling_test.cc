// engine::generate where the model samples on its device
// (Transformer::samples_on_device): a test double of a backend, the CPU
// backend's ops with a sample_rows of its own, sees every step's row. At
// temperature 0 it applies the row's edits as backend/row_sampling.h states
// them and takes the argmax (lowest id on a tie): the tokens must be those of
// generate on the CPU backend, where engine::Sampler samples the host logits
// with the same penalties. At temperature > 0 it picks floor(uniform · vocab),
// so the tokens show that each draw took the next number of the request's own
// generator. The CUDA sampler's own agreement with the host Sampler is
// checked by tests/cuda.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../decode_graph_schedule.h"
#include "../forwarding_cpu_backend.h"
#include "backend/backend.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "model/random_weights.h"

namespace tessera::engine {
namespace {

class RowSamplingCpuBackend final : public testing::ForwardingCpuBackend {
 public:
  bool samples_rows() const override { return true; }
  std::vector<int32_t> sample_rows(Tensor& logits, const backend::SamplingBatch& sampling) override {
    const int64_t vocab = logits.dim(1);
    float* values = logits.data<float>();
    ++calls;
    edits_seen += static_cast<int64_t>(sampling.edits.size());
    if (apply_edits) {
      for (const backend::LogitEdit& e : sampling.edits) {
        float& v = values[e.row * vocab + e.id];
        if (e.repetition_penalty != 1.0f) v = v > 0.0f ? v / e.repetition_penalty : v * e.repetition_penalty;
        v = v - e.penalty + e.bias;
        if (e.masked != 0) v = -std::numeric_limits<float>::infinity();
      }
    }
    std::vector<int32_t> ids;
    for (size_t r = 0; r < sampling.rows.size(); ++r) {
      const backend::SamplingRow& row = sampling.rows[r];
      if (row.temperature > 0.0f) {
        ids.push_back(static_cast<int32_t>(std::floor(row.uniform * static_cast<double>(vocab))));
      } else {
        ids.push_back(argmax(values + static_cast<int64_t>(r) * vocab, vocab));
      }
    }
    return ids;
  }

  bool apply_edits = true;
  int64_t calls = 0, edits_seen = 0;
};

GenerateOptions penalized_greedy() {
  GenerateOptions options;
  options.max_new_tokens = 24;
  options.sampling.repetition_penalty = 1.5f;
  options.sampling.presence_penalty = 0.5f;
  options.sampling.frequency_penalty = 0.3f;
  options.sampling.logit_bias = {{7, 2.0f}};
  return options;
}

const std::vector<int32_t> kPrompt = {3, 14, 15, 92, 65};

std::vector<int32_t> on_cpu(const GenerateOptions& options) {
  auto cpu = backend::make_cpu_backend();
  auto model = model::make_random_transformer(testing::small_spec(), *cpu, 11);
  EXPECT_FALSE(model->samples_on_device());
  return generate(*model, kPrompt, options).tokens;
}

TEST(engineGenerate, SamplesOnTheDeviceWithTheHostSamplersPenalties) {
  RowSamplingCpuBackend device;
  auto model = model::make_random_transformer(testing::small_spec(), device, 11);
  ASSERT_TRUE(model->samples_on_device());
  const GenerateOptions options = penalized_greedy();
  const std::vector<int32_t> tokens = generate(*model, kPrompt, options).tokens;
  EXPECT_EQ(device.calls, options.max_new_tokens);  // every token sampled on the "device"
  EXPECT_GT(device.edits_seen, 0);
  EXPECT_EQ(tokens, on_cpu(options));
}

// The comparison above can fail: the same double without the edits strays
// from the host Sampler's tokens.
TEST(engineGenerate, DeviceSamplesWithoutTheEditsDiffer) {
  RowSamplingCpuBackend device;
  device.apply_edits = false;
  auto model = model::make_random_transformer(testing::small_spec(), device, 11);
  const GenerateOptions options = penalized_greedy();
  EXPECT_NE(generate(*model, kPrompt, options).tokens, on_cpu(options));
}

TEST(engineGenerate, EachDeviceDrawTakesTheNextNumberOfTheRequestsGenerator) {
  RowSamplingCpuBackend device;
  auto model = model::make_random_transformer(testing::small_spec(), device, 11);
  GenerateOptions options;
  options.max_new_tokens = 12;
  options.sampling.temperature = 0.8f;
  options.sampling.seed = 1234;
  const std::vector<int32_t> tokens = generate(*model, kPrompt, options).tokens;
  Sampler reference(options.sampling);
  const double vocab = static_cast<double>(testing::small_spec().vocab_size);
  std::vector<int32_t> expected;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    expected.push_back(static_cast<int32_t>(std::floor(reference.next_uniform() * vocab)));
  }
  EXPECT_EQ(tokens, expected);
}

}  // namespace
}  // namespace tessera::engine
