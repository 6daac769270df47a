// The Sampler against its plain twin: the processed distribution written the
// obvious way (a double log-softmax over the whole vocabulary, every id
// ranked, the draw walking the vocabulary in id order), with the same seeded
// generator. The Sampler takes shortcuts a vocabulary of 10^5 needs (a heap
// for top_k, no full ranking, log Σ exp only where top_p or logprobs need
// it); over a grid of vocabularies, truncations, temperatures, penalties,
// masks, tie-heavy logits and logits at the Sampler's exp's least accurate
// point both must draw the same tokens with logprobs within 2e-6. A twin
// with top_k one too large is caught; so was an exp polynomial of degree 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "engine/sampler.h"

namespace tessera::engine {
namespace {

struct Reference {
  SamplingParams params;
  std::mt19937_64 rng;
  int top_k_bias = 0;  // planted bug: keeps top_k + bias

  explicit Reference(const SamplingParams& p, int bias = 0) : params(p), rng(p.seed), top_k_bias(bias) {}

  SampleResult sample(const std::vector<float>& logits, const SampleInputs& in) {
    std::vector<float> x = logits;
    apply_penalties_and_masks(x, params, in);
    const bool greedy = params.temperature <= 0.0f;
    if (!greedy) {
      for (float& v : x) v /= params.temperature;
    }
    const size_t vocab = x.size();
    const float max_value = *std::max_element(x.begin(), x.end());
    double total = 0.0;
    for (float v : x) total += std::exp(static_cast<double>(v) - max_value);
    const double log_total = std::log(total) + max_value;
    std::vector<double> logp(vocab);
    for (size_t i = 0; i < vocab; ++i) logp[i] = static_cast<double>(x[i]) - log_total;
    std::vector<int32_t> ranked(vocab);
    std::iota(ranked.begin(), ranked.end(), 0);
    std::stable_sort(ranked.begin(), ranked.end(), [&](int32_t a, int32_t b) { return logp[a] > logp[b]; });
    SampleResult result;
    if (greedy) {
      result.token = ranked[0];
    } else {
      size_t keep = params.top_k > 0 ? std::min<size_t>(vocab, params.top_k + top_k_bias) : vocab;
      if (params.top_p < 1.0f) {
        double cumulative = 0.0;
        for (size_t i = 0; i < keep; ++i) {
          cumulative += std::exp(logp[ranked[i]]);
          if (cumulative >= params.top_p) {
            keep = i + 1;
            break;
          }
        }
      }
      if (params.min_p > 0.0f) {
        size_t n = 1;
        while (n < keep && logp[ranked[n]] >= std::log(static_cast<double>(params.min_p)) + logp[ranked[0]]) ++n;
        keep = n;
      }
      std::vector<char> kept(vocab, 0);
      for (size_t i = 0; i < keep; ++i) kept[ranked[i]] = 1;
      std::vector<double> weights(vocab, 0.0);
      double sum = 0.0;
      for (size_t i = 0; i < vocab; ++i) {
        if (kept[i]) sum += weights[i] = std::exp(logp[i] - logp[ranked[0]]);
      }
      double target = std::uniform_real_distribution<double>(0.0, sum)(rng);
      result.token = ranked[0];
      for (size_t i = 0; i < vocab; ++i) {
        if (!kept[i] || weights[i] <= 0.0) continue;
        result.token = static_cast<int32_t>(i);
        target -= weights[i];
        if (target <= 0.0) break;
      }
    }
    if (in.logprobs || in.top_logprobs > 0) {
      result.logprob = static_cast<float>(logp[result.token]);
      for (int32_t i = 0; i < in.top_logprobs && i < static_cast<int32_t>(vocab); ++i) {
        result.top_logprobs.push_back({ranked[i], static_cast<float>(logp[ranked[i]])});
      }
    }
    return result;
  }
};

enum class Logits { kNormal, kCoarse, kExpWorstCase };

std::vector<float> make_logits(size_t vocab, uint32_t seed, Logits kind) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    const float v = dist(rng);
    switch (kind) {
      case Logits::kNormal: x[i] = v; break;
      case Logits::kCoarse: x[i] = std::round(v * 2.0f) / 2.0f; break;  // many ties
      // Every logit but one where the Sampler's exp reduces to e^f with f
      // near -ln2 / 2, its least accurate point, a few powers of 2 below the max.
      case Logits::kExpWorstCase: x[i] = i == seed % vocab ? 0.0f : -0.34f - 0.6931472f * float((i + seed) % 4); break;
    }
  }
  return x;
}

struct Case {
  SamplingParams params;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool penalties_and_masks = false;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (float t : {0.0f, 0.7f, 1.3f})
    for (int32_t k : {0, 1, 5, 40, 3000})
      for (float p : {1.0f, 0.9f, 0.3f})
        for (float min_p : {0.0f, 0.05f}) {
          Case c;
          c.params.temperature = t;
          c.params.top_k = k;
          c.params.top_p = p;
          c.params.min_p = min_p;
          c.params.seed = static_cast<uint64_t>(all.size()) + 1;
          c.logprobs = all.size() % 3 == 0;
          c.top_logprobs = all.size() % 4 == 0 ? 5 : 0;
          c.penalties_and_masks = all.size() % 5 == 0;
          if (c.penalties_and_masks) {
            c.params.repetition_penalty = 1.2f;
            c.params.presence_penalty = 0.5f;
            c.params.frequency_penalty = 0.25f;
          }
          all.push_back(c);
        }
  return all;
}

// Draws `steps` tokens from each; the first difference, or "" when none.
std::string first_difference(const Case& c, size_t vocab, Logits kind, int bias) {
  Sampler fast(c.params);
  Reference plain(c.params, bias);
  std::vector<int32_t> prompt = {3, 9, 9, 27, static_cast<int32_t>(vocab - 1)}, output;
  const std::vector<int32_t> masked = {0, 4};
  for (int step = 0; step < 24; ++step) {
    const std::vector<float> logits = make_logits(vocab, static_cast<uint32_t>(step * 7919 + vocab), kind);
    SampleInputs in;
    if (c.penalties_and_masks) {
      in.prompt = prompt;
      in.output = output;
      in.masked = masked;
    }
    in.logprobs = c.logprobs;
    in.top_logprobs = c.top_logprobs;
    const SampleResult a = fast.sample(logits, in), b = plain.sample(logits, in);
    std::string where = "step " + std::to_string(step) + ": ";
    if (a.token != b.token) return where + "token " + std::to_string(a.token) + " vs " + std::to_string(b.token);
    if ((c.logprobs || c.top_logprobs > 0) && std::fabs(a.logprob - b.logprob) > 2e-6f) return where + "logprob";
    if (a.top_logprobs.size() != b.top_logprobs.size()) return where + "top_logprobs count";
    for (size_t i = 0; i < a.top_logprobs.size(); ++i) {
      if (a.top_logprobs[i].token != b.top_logprobs[i].token ||
          std::fabs(a.top_logprobs[i].logprob - b.top_logprobs[i].logprob) > 2e-6f) {
        return where + "top_logprobs[" + std::to_string(i) + "]";
      }
    }
    output.push_back(a.token);
  }
  return "";
}

TEST(engineSamplerReference, DrawsWhatThePlainTwinDraws) {
  int compared = 0;
  for (size_t vocab : {size_t{7}, size_t{1000}, size_t{92544}})
    for (Logits kind : {Logits::kNormal, Logits::kCoarse, Logits::kExpWorstCase})
      for (const Case& c : cases()) {
        if (vocab == 92544 && (c.params.seed % 4) != 0) continue;  // a quarter of the grid at the large vocabulary
        const std::string diff = first_difference(c, vocab, kind, 0);
        EXPECT_EQ(diff, "") << "vocab " << vocab << " logits " << static_cast<int>(kind) << " T " << c.params.temperature
                            << " top_k " << c.params.top_k << " top_p " << c.params.top_p << " min_p " << c.params.min_p;
        ++compared;
      }
  EXPECT_GT(compared, 450);
}

TEST(engineSamplerReference, ATwinKeepingOneTokenTooManyIsCaught) {
  Case c;
  c.params.temperature = 1.0f;
  c.params.top_k = 5;
  c.params.seed = 3;
  EXPECT_NE(first_difference(c, 1000, Logits::kNormal, 1), "");
}

}  // namespace
}  // namespace tessera::engine
