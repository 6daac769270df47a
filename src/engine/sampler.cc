#include "engine/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace tessera::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void require(bool ok, const char* field, const std::string& what) {
  if (!ok) throw Error(ErrorKind::kInvalidArgument, fmt::format("{} {}", field, what), "change the sampling parameter");
}

// Log-softmax of `x` (entries may be -inf) into double.
std::vector<double> log_softmax(const std::vector<float>& x) {
  const float max_value = *std::max_element(x.begin(), x.end());
  std::vector<double> out(x.size());
  if (max_value == kNegInf) {
    std::fill(out.begin(), out.end(), -std::numeric_limits<double>::infinity());
    return out;
  }
  double total = 0.0;
  for (float v : x) total += std::exp(static_cast<double>(v) - max_value);
  const double log_total = std::log(total) + max_value;
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - log_total;
  return out;
}

// Ids ordered likeliest first, lowest id on a tie.
std::vector<int32_t> ranked(const std::vector<double>& values, size_t count) {
  std::vector<int32_t> ids(values.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return values[a] > values[b] || (values[a] == values[b] && a < b); };
  count = std::min(count, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), better);
  ids.resize(count);
  return ids;
}

}  // namespace

void validate(const SamplingParams& p) {
  require(std::isfinite(p.temperature) && p.temperature >= 0.0f, "temperature", "must be >= 0");
  require(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p", "must be in (0, 1]");
  require(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p", "must be in [0, 1]");
  require(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f, "repetition_penalty", "must be > 0");
  require(std::isfinite(p.presence_penalty), "presence_penalty", "must be finite");
  require(std::isfinite(p.frequency_penalty), "frequency_penalty", "must be finite");
}

int32_t argmax(const float* values, int64_t count) {
  // The largest value first (eight independent branch-free lanes, so the loop
  // is not one long dependency chain), then its first index: the lowest id on
  // a tie, as std::max_element.
  float lane[8];
  std::fill(lane, lane + 8, values[0]);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] = values[i + k] > lane[k] ? values[i + k] : lane[k];
  }
  for (; i < count; ++i) lane[0] = values[i] > lane[0] ? values[i] : lane[0];
  float best = lane[0];
  for (int k = 1; k < 8; ++k) best = lane[k] > best ? lane[k] : best;
  for (i = 0; i < count; ++i) {
    if (values[i] == best) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(std::max_element(values, values + count) - values);  // NaNs only
}

void apply_penalties_and_masks(std::vector<float>& x, const SamplingParams& p, const SampleInputs& in) {
  const int64_t vocab = static_cast<int64_t>(x.size());
  auto valid = [&](int32_t id) { return id >= 0 && id < vocab; };
  if (p.repetition_penalty != 1.0f) {
    std::unordered_set<int32_t> seen(in.prompt.begin(), in.prompt.end());
    seen.insert(in.output.begin(), in.output.end());
    for (int32_t id : seen) {
      if (!valid(id)) continue;
      x[id] = x[id] > 0.0f ? x[id] / p.repetition_penalty : x[id] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : in.output) ++counts[id];
    for (auto [id, count] : counts) {
      if (!valid(id)) continue;
      x[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    }
  }
  for (int32_t id : in.masked) {
    if (valid(id)) x[id] = kNegInf;
  }
}

SampleResult Sampler::sample(std::span<const float> logits, const SampleInputs& in) {
  TESSERA_CHECK(!logits.empty());
  const bool plain_greedy = params_.temperature <= 0.0f && params_.repetition_penalty == 1.0f &&
                            params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f &&
                            in.masked.empty() && !in.logprobs && in.top_logprobs == 0;
  if (plain_greedy) return {argmax(logits.data(), static_cast<int64_t>(logits.size()))};  // nothing to copy
  std::vector<float> x(logits.begin(), logits.end());
  apply_penalties_and_masks(x, params_, in);
  const bool greedy = params_.temperature <= 0.0f;
  if (!greedy) {
    for (float& v : x) v /= params_.temperature;
  }
  SampleResult result;
  std::vector<double> logp;
  if (greedy) {
    result.token = argmax(x.data(), static_cast<int64_t>(x.size()));
  } else {
    logp = log_softmax(x);
    // Truncation (top_k, top_p, min_p) over the likeliest-first order.
    const size_t vocab = x.size();
    const size_t k = params_.top_k > 0 ? std::min<size_t>(params_.top_k, vocab) : vocab;
    std::vector<int32_t> order = ranked(logp, k);
    size_t keep = order.size();
    if (params_.top_p < 1.0f) {
      double cumulative = 0.0;
      for (size_t i = 0; i < order.size(); ++i) {
        cumulative += std::exp(logp[order[i]]);
        if (cumulative >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (params_.min_p > 0.0f) {
      const double threshold = std::log(static_cast<double>(params_.min_p)) + logp[order[0]];
      size_t n = 1;
      while (n < keep && logp[order[n]] >= threshold) ++n;
      keep = n;
    }
    std::vector<char> kept(vocab, 0);
    for (size_t i = 0; i < keep; ++i) kept[order[i]] = 1;
    // Inverse transform over the kept tokens, in id order.
    std::vector<double> weights(vocab, 0.0);
    double total = 0.0;
    for (size_t i = 0; i < vocab; ++i) {
      if (kept[i]) total += weights[i] = std::exp(logp[i] - logp[order[0]]);
    }
    double target = std::uniform_real_distribution<double>(0.0, total)(rng_);
    result.token = order[0];
    for (size_t i = 0; i < vocab; ++i) {
      if (!kept[i] || weights[i] <= 0.0) continue;
      result.token = static_cast<int32_t>(i);
      target -= weights[i];
      if (target <= 0.0) break;
    }
  }
  if (in.logprobs || in.top_logprobs > 0) {
    if (logp.empty()) logp = log_softmax(x);  // greedy: temperature 1
    result.logprob = static_cast<float>(logp[result.token]);
    for (int32_t id : ranked(logp, std::max<int32_t>(0, in.top_logprobs))) {
      result.top_logprobs.push_back({id, static_cast<float>(logp[id])});
    }
  }
  return result;
}

}  // namespace tessera::engine
