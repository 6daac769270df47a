// The pieces of AWQ's activation-aware scaling (model/convert/awq_scales.h)
// on small made-up inputs: the scale's form, its tie across the query heads
// of a KV head, and the two searches, each of which holds round-to-nearest
// among its candidates and so can never do worse than it on the rows it
// measures. (tests/python/test_awq.py checks whole exports.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/backend.h"
#include "model/convert/awq_quantize.h"
#include "model/convert/awq_scales.h"

namespace tessera::model {
namespace {

// Inputs of `dim` channels over `rows` tokens, channel j of magnitude
// magnitudes[j] (random signs and spread), every row kept for the search.
LinearInputs made_up_inputs(const std::vector<float>& magnitudes, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t dim = static_cast<int64_t>(magnitudes.size());
  LinearInputs in;
  in.abs_sum.assign(dim, 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < dim; ++j) {
      const float x = magnitudes[j] * normal(rng);
      in.rows.push_back(x);
      in.abs_sum[j] += std::fabs(x);
    }
  }
  in.tokens = in.row_count = rows;
  return in;
}

Tensor random_weight(int64_t out, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> heavy(3.0f);
  std::vector<float> w(out * in);
  for (float& v : w) v = heavy(rng) / std::sqrt(static_cast<float>(in));
  return Tensor::from_f32(w, {out, in});
}

TEST(AwqScales, TheScaleFollowsTheActivationsAndKeepsTheMagnitude) {
  LinearInputs in;
  in.abs_sum = {4.0, 1.0, 16.0, 1e-9};
  in.tokens = 1;
  const std::vector<float> half = awq_scale(in, 0.5f);
  ASSERT_EQ(half.size(), 4u);
  // mean|x|^0.5 = 2, 1, 4, and 1e-2 for the channel below the 1e-4 floor; then
  // normalised so that max · min = 1: ÷ sqrt(4 · 0.01) = 0.2.
  EXPECT_NEAR(half[0], 10.0f, 1e-4);
  EXPECT_NEAR(half[1], 5.0f, 1e-4);
  EXPECT_NEAR(half[2], 20.0f, 1e-4);
  EXPECT_NEAR(half[3], 0.05f, 1e-6);
  EXPECT_NEAR(*std::max_element(half.begin(), half.end()) * *std::min_element(half.begin(), half.end()), 1.0f, 1e-5);
  for (float s : awq_scale(in, 0.0f)) EXPECT_EQ(s, 1.0f);
}

TEST(AwqScales, TheOProjectionsScaleIsOneValueForTheQueryHeadsOfAKvHead) {
  // 4 query heads, 2 KV heads, head_dim 2: heads 0-1 share KV head 0, 2-3 KV head 1.
  LinearInputs in;
  in.abs_sum = {1, 2, 3, 4, 5, 6, 7, 8};
  in.tokens = 1;
  const LinearInputs tied = tied_to_kv_heads(in, 4, 2, 2);
  const std::vector<double> want = {2, 3, 2, 3, 6, 7, 6, 7};
  EXPECT_EQ(tied.abs_sum, want);
  const std::vector<float> s = awq_scale(tied, 0.5f);
  EXPECT_EQ(s[0], s[2]);
  EXPECT_EQ(s[5], s[7]);
  EXPECT_NE(s[0], s[4]);
  const std::vector<float> kv = kv_scale(s, 4, 2, 2);
  EXPECT_EQ(kv, (std::vector<float>{s[0], s[1], s[4], s[5]}));
}

TEST(AwqScales, TheAlphaSearchNeverLosesToRoundingAndFindsSalientChannels) {
  auto cpu = backend::make_cpu_backend();
  std::vector<float> magnitudes(64, 1.0f);
  for (int j : {5, 30, 41}) magnitudes[j] = 20.0f;  // salient channels
  const LinearInputs salient = made_up_inputs(magnitudes, 128, 1);
  const Tensor w = random_weight(48, 64, 2);
  const InputScale searched = choose_input_scale(w, salient, 32, /*search=*/true, 0.5f, *cpu);
  EXPECT_LE(searched.error, searched.rtn_error);
  EXPECT_GT(searched.alpha, 0.0f);
  EXPECT_LT(searched.error, 0.7 * searched.rtn_error) << "the salient channels are worth scaling";
  EXPECT_GT(searched.s[5], searched.s[0]);
  // Without a search: the scale at the given alpha, nothing measured.
  const InputScale fixed = choose_input_scale(w, salient, 32, /*search=*/false, 0.5f, *cpu);
  EXPECT_EQ(fixed.alpha, 0.5f);
  EXPECT_EQ(fixed.s, awq_scale(salient, 0.5f));
}

TEST(AwqScales, ClippingNeverLosesToRoundingAndStaysInsideTheRange) {
  auto cpu = backend::make_cpu_backend();
  const LinearInputs in = made_up_inputs(std::vector<float>(64, 1.0f), 128, 3);
  const Tensor w = random_weight(24, 64, 4);
  double gain = -1.0;
  const Tensor clipped = clip_for_rounding(w, in, {}, 32, *cpu, &gain);
  EXPECT_GE(gain, 0.0);
  EXPECT_GT(gain, 0.0) << "heavy-tailed weights gain from some clipping";
  const float* a = w.data<float>();
  const float* b = clipped.data<float>();
  int changed = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    EXPECT_LE(std::fabs(b[i]), std::fabs(a[i]) + 1e-7f);  // only ever pulled towards zero
    EXPECT_EQ(std::signbit(a[i]), std::signbit(b[i]));
    changed += a[i] != b[i];
  }
  EXPECT_GT(changed, 0);
  // Clipped at most to 0.55 of each group's largest magnitude.
  for (int64_t o = 0; o < w.dim(0); ++o) {
    for (int64_t g = 0; g < 2; ++g) {
      float most = 0.0f, kept = 0.0f;
      for (int64_t i = 0; i < 32; ++i) {
        most = std::max(most, std::fabs(a[o * 64 + g * 32 + i]));
        kept = std::max(kept, std::fabs(b[o * 64 + g * 32 + i]));
      }
      EXPECT_GE(kept, 0.55f * most - 1e-6f);
    }
  }
}

}  // namespace
}  // namespace tessera::model
