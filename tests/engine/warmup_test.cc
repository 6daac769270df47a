// The memory plan's warm-up measurement on the CPU backend, whose allocator
// counts bytes: a step's workspace is what its forward allocates above what
// was in use, it grows with the step, and it agrees with the estimate from
// the shapes within a factor of two.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "engine/memory_plan.h"
#include "engine/warmup.h"
#include "model/random_weights.h"

namespace tessera::engine {
namespace {

model::ModelSpec small_spec() {
  model::ModelSpec spec = model::random_model_spec("100m");
  spec.num_layers = 2;
  spec.vocab_size = 2000;
  return spec;
}

TEST(engineWarmup, MeasuresWhatTheLargestStepAllocates) {
  auto cpu = backend::make_cpu_backend();
  auto model = model::make_random_transformer(small_spec(), *cpu, 3);
  const auto small = measure_workspace(*model, 32, 4, 16);
  const auto large = measure_workspace(*model, 256, 32, 16);
  ASSERT_TRUE(small && large) << "the CPU allocator counts its bytes";
  EXPECT_EQ(large->step_tokens, 256);
  EXPECT_EQ(large->logits_rows, 32);
  EXPECT_GT(small->workspace_bytes, 0u);
  EXPECT_GT(large->workspace_bytes, 4 * small->workspace_bytes) << "8 times the tokens";
  const size_t estimate = workspace_bytes(model->spec(), DType::kF32, 256 + 32, 32);
  EXPECT_GT(large->workspace_bytes, estimate / 2);
  EXPECT_LT(large->workspace_bytes, estimate * 2);
}

TEST(engineWarmup, TheHostAllocatorCountsLiveBytesAndTheirPeak) {
  Allocator& host = cpu_allocator();
  host.reset_peak();
  const Allocator::Usage before = *host.usage();
  {
    Tensor a = Tensor::empty({1 << 18}, DType::kF32);  // 1 MiB
    EXPECT_EQ(host.usage()->in_use, before.in_use + (1u << 20));
  }
  const Allocator::Usage after = *host.usage();
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_GE(after.peak, before.in_use + (1u << 20));
}

}  // namespace
}  // namespace tessera::engine
