// Sampler: each processing step against small hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "engine/sampler.h"

namespace tessera::engine {
namespace {

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits.data(), static_cast<int64_t>(logits.size()))];
  return h;
}

TEST(engineSampler, GreedyTakesTheLowestIdOnATie) {
  Sampler s({});
  const std::vector<float> x = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(x.data(), 4), 1);
}

TEST(engineSampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeOverPromptAndOutput) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  std::vector<float> x = {2.0f, -2.0f, 1.0f, 0.5f};
  const std::vector<int32_t> prompt = {0}, output = {1, 1};
  apply_penalties_and_masks(x, p, {prompt, output, {}});
  EXPECT_EQ(x, (std::vector<float>{1.0f, -4.0f, 1.0f, 0.5f}));
  // Greedy now ties 0 and 2: the lowest id wins.
  Sampler s(p);
  const std::vector<float> raw = {2.0f, -2.0f, 1.0f, 0.5f};
  EXPECT_EQ(s.sample(raw, {prompt, output, {}}).token, 0);
}

TEST(engineSampler, PresenceAndFrequencyPenaltiesCountOutputOnly) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  std::vector<float> x = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> prompt = {0}, output = {2, 2, 3};
  apply_penalties_and_masks(x, p, {prompt, output, {}});
  EXPECT_FLOAT_EQ(x[0], 1.0f);          // prompt ids are not penalised
  EXPECT_FLOAT_EQ(x[1], 1.0f);
  EXPECT_FLOAT_EQ(x[2], 1.0f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(x[3], 1.0f - 0.5f - 0.25f);
}

TEST(engineSampler, LogitBiasIsAddedAfterPenaltiesAndBeforeMasks) {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 0.0f};
  SamplingParams p;
  p.logit_bias = {{0, 5.0f}};  // 6 beats 3
  EXPECT_EQ(Sampler(p).sample(x, {}).token, 0);
  p.logit_bias = {{2, -100.0f}, {3, 1.5f}};  // 3 - 100 loses to 2
  EXPECT_EQ(Sampler(p).sample(x, {}).token, 1);
  p.logit_bias = {{0, 100.0f}};
  const std::vector<int32_t> masked = {0};  // a mask wins over any bias (min_tokens, stop ids)
  EXPECT_EQ(Sampler(p).sample(x, {{}, {}, masked}).token, 2);
  SamplingParams warm{1.0f, 4};
  warm.logit_bias = {{3, -100.0f}};
  Sampler sampler(warm);
  for (int i = 0; i < 2000; ++i) EXPECT_NE(sampler.sample(x.data(), 4), 3);
  warm.logit_bias = {{1, 101.0f}};
  EXPECT_THROW(validate(warm), Error);
}

TEST(engineSampler, MaskedIdsAreNeverChosen) {
  Sampler s({});
  const std::vector<float> x = {0.0f, 5.0f, 4.0f};
  const std::vector<int32_t> masked = {1};
  EXPECT_EQ(s.sample(x, {{}, {}, masked}).token, 2);
}

TEST(engineSampler, TemperatureSamplesTheSoftmax) {
  // p = [0.5, 0.3, 0.2]; at T = 0.5 the weights are p^2 = [0.25, 0.09, 0.04] / 0.38.
  const auto x = log_probs({0.5, 0.3, 0.2});
  Sampler one({1.0f, 11});
  auto h1 = histogram(one, x, 40000);
  EXPECT_NEAR(h1[0] / 40000.0, 0.5, 0.015);
  EXPECT_NEAR(h1[2] / 40000.0, 0.2, 0.015);
  Sampler half({0.5f, 11});
  auto h2 = histogram(half, x, 40000);
  EXPECT_NEAR(h2[0] / 40000.0, 0.25 / 0.38, 0.015);
  EXPECT_NEAR(h2[2] / 40000.0, 0.04 / 0.38, 0.01);
}

TEST(engineSampler, TopKKeepsTheKLikeliest) {
  const auto x = log_probs({0.1, 0.4, 0.3, 0.2});
  SamplingParams p{1.0f, 3};
  p.top_k = 2;
  Sampler s(p);
  auto h = histogram(s, x, 20000);
  EXPECT_EQ(h.count(0) + h.count(3), 0u);
  EXPECT_NEAR(h[1] / 20000.0, 0.4 / 0.7, 0.015);
}

TEST(engineSampler, TopPKeepsTheSmallestSetReachingP) {
  const auto x = log_probs({0.5, 0.3, 0.2});
  SamplingParams p{1.0f, 5};
  p.top_p = 0.6f;  // 0.5 < 0.6 <= 0.8: tokens 0 and 1
  Sampler s(p);
  auto h = histogram(s, x, 20000);
  EXPECT_EQ(h.count(2), 0u);
  EXPECT_NEAR(h[0] / 20000.0, 0.5 / 0.8, 0.015);
  p.top_p = 0.45f;  // token 0 alone reaches it
  Sampler only(p);
  EXPECT_EQ(histogram(only, x, 2000)[0], 2000);
}

TEST(engineSampler, MinPDropsTokensBelowAFractionOfTheLikeliest) {
  const auto x = log_probs({0.5, 0.3, 0.2});
  SamplingParams p{1.0f, 9};
  p.min_p = 0.5f;  // threshold 0.25: tokens 0 and 1
  Sampler s(p);
  auto h = histogram(s, x, 20000);
  EXPECT_EQ(h.count(2), 0u);
  EXPECT_GT(h[1], 0);
  p.min_p = 0.7f;  // threshold 0.35: token 0 alone
  Sampler only(p);
  EXPECT_EQ(histogram(only, x, 2000)[0], 2000);
}

TEST(engineSampler, TheSameSeedGivesTheSameTokens) {
  const auto x = log_probs({0.25, 0.25, 0.25, 0.25});
  Sampler a({1.0f, 42}), b({1.0f, 42}), c({1.0f, 43});
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 64; ++i) {
    ta.push_back(a.sample(x.data(), 4));
    tb.push_back(b.sample(x.data(), 4));
    tc.push_back(c.sample(x.data(), 4));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(engineSampler, LogprobsAreTheLogSoftmaxOfTheProcessedLogits) {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  SampleInputs in;
  in.logprobs = true;
  in.top_logprobs = 2;
  Sampler greedy({});
  SampleResult r = greedy.sample(x, in);
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, 3.0 - lse, 1e-6);
  ASSERT_EQ(r.top_logprobs.size(), 2u);
  EXPECT_EQ(r.top_logprobs[0].token, 2);
  EXPECT_EQ(r.top_logprobs[1].token, 1);
  EXPECT_NEAR(r.top_logprobs[1].logprob, 2.0 - lse, 1e-6);
  // With temperature 2 the distribution is softmax(x / 2); a masked id gets -inf.
  SamplingParams p{2.0f, 1};
  p.top_k = 1;
  Sampler warm(p);
  const std::vector<int32_t> masked = {0};
  in.masked = masked;
  r = warm.sample(x, in);
  const double lse2 = std::log(std::exp(1.0) + std::exp(1.5));
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, 1.5 - lse2, 1e-6);
  EXPECT_NEAR(r.top_logprobs[1].logprob, 1.0 - lse2, 1e-6);
}

TEST(engineSampler, ValidateRefusesOutOfRangeValues) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(validate(p), Error);
  p = {};
  p.temperature = -1.0f;
  EXPECT_THROW(validate(p), Error);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(validate(p), Error);
  EXPECT_NO_THROW(validate(SamplingParams{}));
}

}  // namespace
}  // namespace tessera::engine
