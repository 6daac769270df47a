// Sampling one token from a row of logits. This first sampler knows greedy and
// temperature (with a seed); the engine's full sampler grows from here.
#pragma once

#include <cstdint>
#include <random>

namespace tessera::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax; the lowest id wins a tie)
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  // logits [vocab] f32
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

int32_t argmax(const float* values, int64_t count);

}  // namespace tessera::engine
