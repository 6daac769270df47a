#include "model/layers/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tessera::model {

namespace {

// base^(-2i/d) for i in [0, d/2), rounded to f32 as transformers does.
std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> inv_freq(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(base), exponent);
  }
  return inv_freq;
}

void apply_llama3(std::vector<float>& inv_freq, const RopeScaling& s) {
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  for (float& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = static_cast<float>(f / s.factor);  // long wavelengths: interpolate
    } else if (wavelen >= high_freq_wavelen) {  // the band between: blend smoothly
      const double smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
    }  // short wavelengths stay as they are
  }
}

double yarn_mscale(double factor) { return factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0; }

void apply_yarn(std::vector<float>& inv_freq, const RopeScaling& s, double base, int64_t dim, float* scaling) {
  auto correction_dim = [&](double rotations) {
    return dim * std::log(s.original_max_position_embeddings / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(base));
  };
  double low = std::max(0.0, std::floor(correction_dim(s.beta_fast)));
  double high = std::min(static_cast<double>(dim - 1), std::ceil(correction_dim(s.beta_slow)));
  if (low == high) high += 0.001;  // avoids a division by zero in the ramp
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const float extrapolated = inv_freq[i];
    const float interpolated = static_cast<float>(extrapolated / s.factor);
    inv_freq[i] = static_cast<float>(interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight);
  }
  *scaling = static_cast<float>(s.attention_factor.value_or(yarn_mscale(s.factor)));
}

}  // namespace

bool rope_depends_on_length(const ModelSpec& spec, int64_t seq_len) {
  return spec.rope_scaling.type == RopeScalingType::kDynamic && seq_len > spec.max_position_embeddings;
}

RopeFrequencies rope_frequencies(const ModelSpec& spec, int64_t seq_len) {
  const RopeScaling& s = spec.rope_scaling;
  const int64_t dim = spec.head_dim;
  double base = spec.rope_theta;
  RopeFrequencies out;
  if (rope_depends_on_length(spec, seq_len)) {
    const double ratio = s.factor * static_cast<double>(seq_len) / spec.max_position_embeddings - (s.factor - 1.0);
    base *= std::pow(ratio, static_cast<double>(dim) / (dim - 2));
  }
  out.inv_freq = default_inv_freq(base, dim);
  switch (s.type) {
    case RopeScalingType::kLinear:
      for (float& f : out.inv_freq) f = static_cast<float>(f / s.factor);
      break;
    case RopeScalingType::kLlama3:
      apply_llama3(out.inv_freq, s);
      break;
    case RopeScalingType::kYarn:
      apply_yarn(out.inv_freq, s, base, dim, &out.attention_scaling);
      break;
    case RopeScalingType::kNone:
    case RopeScalingType::kDynamic:
      break;
  }
  return out;
}

}  // namespace tessera::model
