// A fake Executor for engine tests: deterministic logits from the plan alone.
// The row of a chunk whose last token is t peaks at (t + 1) % vocab (logit 10)
// with a runner-up at (t + 2) % vocab (logit 5), so a greedy request counts
// upwards from its last prompt token. Hooks let a test slow a step down or
// make it throw.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/executor.h"

namespace tessera::engine::testing {

class FakeExecutor : public Executor {
 public:
  explicit FakeExecutor(int64_t vocab = 32) : vocab_(vocab) {}

  StepOutput execute(const StepPlan& plan) override {
    ++steps;
    if (before_step) before_step(plan);
    {
      std::lock_guard lock(mutex);
      plans.push_back(plan);
    }
    const int64_t rows = plan.num_sampling();
    if (rows == 0) return {};
    Tensor logits = Tensor::empty({rows, vocab_}, DType::kF32);
    int64_t row = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.sample) continue;
      float* out = logits.data<float>() + row++ * vocab_;
      const int32_t last = c.token_ids.back();
      out[(last + 1) % vocab_] = 10.0f;
      out[(last + 2) % vocab_] = 5.0f;
    }
    StepOutput out;
    out.logits = logits;
    return out;
  }
  int64_t vocab_size() const override { return vocab_; }

  std::atomic<int64_t> steps{0};
  std::function<void(const StepPlan&)> before_step;  // runs on the engine thread; may throw
  std::mutex mutex;
  std::vector<StepPlan> plans;

 private:
  int64_t vocab_;
};

}  // namespace tessera::engine::testing
