#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::engine {

int32_t argmax(const float* values, int64_t count) {
  return static_cast<int32_t>(std::max_element(values, values + count) - values);
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (params_.temperature <= 0.0f) return argmax(logits, vocab);
  // softmax(logits / T) by inverse transform, in double for a stable sum.
  const float max_logit = *std::max_element(logits, logits + vocab);
  std::vector<double> weights(vocab);
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    weights[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / params_.temperature);
    total += weights[i];
  }
  double target = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (int64_t i = 0; i < vocab; ++i) {
    target -= weights[i];
    if (target <= 0.0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(vocab - 1);
}

}  // namespace tessera::engine
