// The CPU kernels against formulas written out by hand, on small random inputs.
// Attention is judged by a dense (non-paged) softmax attention over a shuffled
// block table, so paging mistakes and masking mistakes both show.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "../compare.h"
#include "backend/backend.h"
#include "backend/cpu/kernels.h"

namespace tessera::backend {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(CpuKernels, RmsNormMatchesFormula) {
  const int64_t n = 3, h = 37;
  auto x = random_vector(n * h, 1), w = random_vector(h, 2);
  std::vector<float> out(n * h);
  cpu::rms_norm(x.data(), w.data(), n, h, 1e-5f, out.data());
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < h; ++j) ss += x[i * h + j] * x[i * h + j];
    double inv = 1.0 / std::sqrt(ss / h + 1e-5);
    for (int64_t j = 0; j < h; ++j) EXPECT_NEAR(out[i * h + j], x[i * h + j] * inv * w[j], 1e-5);
  }
}

TEST(CpuKernels, LinearMatchesLoops) {
  const int64_t m = 5, n = 7, k = 13;
  auto x = random_vector(m * k, 3), w = random_vector(n * k, 4), b = random_vector(n, 5);
  std::vector<float> y(m * n);
  cpu::linear(x.data(), w.data(), b.data(), m, n, k, y.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = b[j];
      for (int64_t t = 0; t < k; ++t) acc += x[i * k + t] * w[j * k + t];
      EXPECT_NEAR(y[i * n + j], acc, 1e-4);
    }
}

TEST(CpuKernels, RopeRotatesHalvesAndKeepsNorm) {
  const int64_t hd = 8;
  auto x = random_vector(hd, 6);
  std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f, 0.001f};
  std::vector<float> y = x;
  cpu::rope_rotate(y.data(), hd, 5, inv_freq.data(), 1.0f);
  for (int i = 0; i < hd / 2; ++i) {
    const float a = 5 * inv_freq[i];
    EXPECT_NEAR(y[i], x[i] * std::cos(a) - x[i + 4] * std::sin(a), 1e-6);
    EXPECT_NEAR(y[i + 4], x[i + 4] * std::cos(a) + x[i] * std::sin(a), 1e-6);
  }
  std::vector<float> z = x;
  cpu::rope_rotate(z.data(), hd, 0, inv_freq.data(), 1.0f);  // position 0: identity
  for (int i = 0; i < hd; ++i) EXPECT_FLOAT_EQ(z[i], x[i]);
}

TEST(CpuKernels, SiluMul) {
  std::vector<float> gu = {1.0f, -2.0f, 3.0f, 0.5f};  // gate [1, -2], up [3, 0.5]
  std::vector<float> out(2);
  cpu::silu_mul(gu.data(), 1, 2, out.data());
  EXPECT_NEAR(out[0], 1.0f / (1.0f + std::exp(-1.0f)) * 3.0f, 1e-6);
  EXPECT_NEAR(out[1], -2.0f / (1.0f + std::exp(2.0f)) * 0.5f, 1e-6);
}

// Dense reference: causal GQA softmax attention over contiguous K/V [len, kv, hd].
std::vector<float> dense_attention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int64_t len, int64_t heads, int64_t kv_heads,
                                   int64_t hd, int64_t query_position, int64_t window) {
  std::vector<float> out(heads * hd, 0.0f);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / (heads / kv_heads);
    std::vector<double> s;
    int64_t first = window > 0 ? std::max<int64_t>(0, query_position - window + 1) : 0;
    for (int64_t p = first; p <= query_position; ++p) {
      double dot = 0;
      for (int64_t d = 0; d < hd; ++d) dot += q[h * hd + d] * k[(p * kv_heads + g) * hd + d];
      s.push_back(dot / std::sqrt(static_cast<double>(hd)));
    }
    double mx = *std::max_element(s.begin(), s.end()), sum = 0;
    for (double& e : s) sum += (e = std::exp(e - mx));
    for (int64_t p = first; p <= query_position; ++p)
      for (int64_t d = 0; d < hd; ++d) out[h * hd + d] += s[p - first] / sum * v[(p * kv_heads + g) * hd + d];
  }
  (void)len;
  return out;
}

// One sequence's `len` new tokens (positions 0 .. len - 1, qkv [len, qkv_size])
// through `table`: k and v written into `cache` unrotated (angle 0), then
// paged attention; out [len, heads * hd].
Tensor write_and_attend(Backend& backend, const std::vector<float>& qkv_values, int64_t len, int64_t heads,
                        int64_t hd, int64_t block_size, const std::vector<int32_t>& table, int64_t window,
                        PagedKvLayer& cache) {
  Tensor qkv = Tensor::from_f32(qkv_values, {len, static_cast<int64_t>(qkv_values.size()) / len});
  AttentionBatch batch;
  batch.positions.resize(len);
  std::iota(batch.positions.begin(), batch.positions.end(), 0);
  batch.query_start = {0, static_cast<int32_t>(len)};
  batch.block_tables = table;
  batch.max_blocks_per_seq = static_cast<int32_t>(table.size());
  batch.sliding_window = window;
  std::vector<float> zero_freq(hd / 2, 0.0f);
  backend.rope_and_cache_write(qkv, heads, zero_freq, 1.0f, batch, cache, block_size);
  Tensor out = Tensor::empty({len, heads * hd}, DType::kF32);
  backend.paged_attention(qkv, heads, batch, cache, block_size, out);
  return out;
}

void check_paged_attention(int64_t heads, int64_t kv_heads, int64_t hd, int64_t block_size, int64_t len,
                           int64_t window) {
  auto backend = make_cpu_backend();
  const int64_t blocks = (len + block_size - 1) / block_size + 2;
  // A shuffled block table: sequence block i lives in physical block table[i].
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));

  PagedKvLayer cache{Tensor::empty({blocks, kv_heads, block_size, hd}, DType::kF32),
                     Tensor::empty({blocks, kv_heads, block_size, hd}, DType::kF32)};
  const int64_t qkv_size = (heads + 2 * kv_heads) * hd;
  auto qkv_values = random_vector(len * qkv_size, 11);
  Tensor out = write_and_attend(*backend, qkv_values, len, heads, hd, block_size, table, window, cache);

  std::vector<float> k(len * kv_heads * hd), v(len * kv_heads * hd);
  for (int64_t t = 0; t < len; ++t)
    for (int64_t j = 0; j < kv_heads * hd; ++j) {
      k[t * kv_heads * hd + j] = qkv_values[t * qkv_size + heads * hd + j];
      v[t * kv_heads * hd + j] = qkv_values[t * qkv_size + (heads + kv_heads) * hd + j];
    }
  for (int64_t t = 0; t < len; ++t) {
    std::vector<float> q(qkv_values.begin() + t * qkv_size, qkv_values.begin() + t * qkv_size + heads * hd);
    auto expected = dense_attention(q, k, v, len, heads, kv_heads, hd, t, window);
    auto c = testing::compare(out.data<float>() + t * heads * hd, expected.data(), expected.size());
    ASSERT_TRUE(c.within(1e-5, 1e-5)) << "token " << t << ": " << c.describe();
  }
}

TEST(CpuKernels, PagedAttentionMatchesDenseOverGrid) {
  for (int64_t hd : {64, 128})
    for (auto [heads, kv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {8, 2}, {8, 1}})
      for (int64_t block : {1, 16, 64})
        for (int64_t len : {1, 17, 70}) check_paged_attention(heads, kv, hd, block, len, 0);
}

TEST(CpuKernels, PagedAttentionSlidingWindow) { check_paged_attention(4, 1, 64, 16, 40, 6); }

// --quant-policy 8 and 4's row format written out again here, in double,
// with L = 2^bits - 1 levels: scale = (max - min) / L, zero = min,
// code = round((x - zero) / scale).
std::vector<int> reference_codes(const float* x, int64_t n, int bits, double* scale, double* zero) {
  const auto [low, high] = std::minmax_element(x, x + n);
  *zero = *low;
  *scale = (static_cast<double>(*high) - *low) / ((1 << bits) - 1);
  std::vector<int> codes(n);
  for (int64_t i = 0; i < n; ++i) codes[i] = *scale > 0 ? static_cast<int>(std::lround((x[i] - *zero) / *scale)) : 0;
  return codes;
}

// Code i of a row stored with `bits` bits: a byte, or a nibble (element 2i low).
int code_at(const uint8_t* row, int64_t i, int bits) {
  return bits == 8 ? row[i] : (row[i / 2] >> (4 * (i % 2))) & 0xF;
}

TEST(CpuKernels, QuantizedRowsFollowTheFormulaAndRoundTripWithinHalfAStep) {
  for (int bits : {8, 4}) {
    for (int64_t n : {8, 64, 128, 256}) {
      std::vector<float> x = random_vector(n, static_cast<uint32_t>(n), 3.0f);
      x[3] = -7.5f;  // the minimum: code 0 and exact
      std::vector<uint8_t> codes(n * bits / 8);
      float params[2];
      cpu::quantize_row(x.data(), n, bits, codes.data(), params);
      double scale, zero;
      const std::vector<int> want = reference_codes(x.data(), n, bits, &scale, &zero);
      EXPECT_NEAR(params[0], scale, 1e-6 * scale);
      EXPECT_EQ(params[1], -7.5f);
      std::vector<float> back(n);
      cpu::dequantize_row(codes.data(), params, n, bits, back.data());
      int low = 255, high = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int code = code_at(codes.data(), i, bits);
        low = std::min(low, code), high = std::max(high, code);
        // A tie may round either way in float and in double; nothing else may differ.
        EXPECT_LE(std::abs(code - want[i]), 1) << bits << " bits, n " << n << " element " << i;
        EXPECT_LE(std::abs(back[i] - x[i]), 0.5 * scale * (1 + 1e-5)) << bits << " bits, n " << n << " element " << i;
      }
      EXPECT_EQ(low, 0);
      EXPECT_EQ(high, (1 << bits) - 1);
    }
    // A row of one value: scale 0, codes 0, and the value comes back exactly.
    std::vector<float> same(64, 0.3f);
    std::vector<uint8_t> codes(64 * bits / 8, 9);
    float params[2];
    cpu::quantize_row(same.data(), 64, bits, codes.data(), params);
    EXPECT_EQ(params[0], 0.0f);
    std::vector<float> back(64);
    cpu::dequantize_row(codes.data(), params, 64, bits, back.data());
    EXPECT_EQ(back, same);
    EXPECT_EQ(codes, std::vector<uint8_t>(64 * bits / 8, 0));
  }
}

// The CPU backend over an 8- or 4-bit cache: what rope_and_cache_write
// stores is the formula's codes, and paged attention is the dense attention
// over the values those codes stand for (and within the rounding of the
// unquantized one: a step of (max - min) / 15 is 17 times 8 bits').
TEST(CpuKernels, PagedAttentionOverAQuantizedCacheMatchesDenseOverItsValues) {
  for (int bits : {8, 4}) {
    const int64_t heads = 8, kv_heads = 2, hd = 64, block_size = 16, len = 45;
    auto backend = make_cpu_backend();
    const int64_t blocks = (len + block_size - 1) / block_size + 1;
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(5));
    const Shape shape = {blocks, kv_heads, block_size, hd}, params = {blocks, kv_heads, block_size, 2};
    const DType codes_dtype = bits == 8 ? DType::kU8 : DType::kU4;
    PagedKvLayer cache{Tensor::empty(shape, codes_dtype), Tensor::empty(shape, codes_dtype),
                       Tensor::empty(params, DType::kF32), Tensor::empty(params, DType::kF32)};
    ASSERT_EQ(cache.code_bits(), bits);
    const int64_t qkv_size = (heads + 2 * kv_heads) * hd;
    auto qkv_values = random_vector(len * qkv_size, 12, 2.0f);
    Tensor out = write_and_attend(*backend, qkv_values, len, heads, hd, block_size, table, 0, cache);

    // k and v as given, and as the cache holds them.
    std::vector<float> k(len * kv_heads * hd), v(len * kv_heads * hd), k_held(k.size()), v_held(v.size());
    int64_t off_by_one = 0;
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t g = 0; g < kv_heads; ++g) {
        const int64_t row = (table[t / block_size] * kv_heads + g) * block_size + t % block_size;
        for (auto [source, given, held, codes, pairs] :
             {std::tuple{heads + g, &k, &k_held, &cache.keys, &cache.key_params},
              std::tuple{heads + kv_heads + g, &v, &v_held, &cache.values, &cache.value_params}}) {
          const float* x = qkv_values.data() + t * qkv_size + source * hd;
          double scale, zero;
          const std::vector<int> want = reference_codes(x, hd, bits, &scale, &zero);
          for (int64_t d = 0; d < hd; ++d) {
            const int code = code_at(codes->data<uint8_t>() + row * hd * bits / 8, d, bits);
            ASSERT_LE(std::abs(code - want[d]), 1) << bits << " bits, token " << t << " head " << g;
            off_by_one += code != want[d];
            (*given)[(t * kv_heads + g) * hd + d] = x[d];
            (*held)[(t * kv_heads + g) * hd + d] =
                std::fmaf(code, pairs->data<float>()[2 * row], pairs->data<float>()[2 * row + 1]);
          }
        }
      }
    }
    EXPECT_LE(off_by_one, 2) << bits << " bits: codes a step away from the formula's (ties only)";
    // 8 bits: 3e-2 abs, 1e-2 of the norm; 4 bits (a step 17 times as large): 0.4 and 0.2.
    const double exact_abs = bits == 8 ? 3e-2 : 0.4, exact_norm = bits == 8 ? 1e-2 : 0.2;
    for (int64_t t = 0; t < len; ++t) {
      std::vector<float> q(qkv_values.begin() + t * qkv_size, qkv_values.begin() + t * qkv_size + heads * hd);
      auto over_held = dense_attention(q, k_held, v_held, len, heads, kv_heads, hd, t, 0);
      auto c = testing::compare(out.data<float>() + t * heads * hd, over_held.data(), over_held.size());
      ASSERT_TRUE(c.within(1e-5, 1e-5)) << bits << " bits, token " << t << ": " << c.describe();
      auto exact = dense_attention(q, k, v, len, heads, kv_heads, hd, t, 0);
      c = testing::compare(out.data<float>() + t * heads * hd, exact.data(), exact.size());
      ASSERT_TRUE(c.within(exact_abs, exact_norm))
          << bits << " bits, token " << t << " against unquantized k and v: " << c.describe();
    }
  }
}

// Backend::fused_linear (the CPU runs the separate ops) against the formulas
// in double: rms_norm or silu·mul before the product, bias, and += into out.
TEST(CpuFusedLinear, EachFusionMatchesTheFormula) {
  auto backend = make_cpu_backend();
  const int64_t n = 3, in = 40, out_features = 7;
  const float eps = 1e-5f;
  for (auto input : {LinearFusion::Input::kAsIs, LinearFusion::Input::kRmsNorm, LinearFusion::Input::kSiluMul}) {
    for (bool accumulate : {false, true}) {
      const int64_t x_width = input == LinearFusion::Input::kSiluMul ? 2 * in : in;
      auto x = random_vector(n * x_width, 11), w = random_vector(out_features * in, 12), g = random_vector(in, 13);
      auto b = random_vector(out_features, 14), start = random_vector(n * out_features, 15);
      Tensor tx = Tensor::from_f32(x, {n, x_width}), tw = Tensor::from_f32(w, {out_features, in});
      Tensor tg = Tensor::from_f32(g, {in}), tb = Tensor::from_f32(b, {out_features});
      Tensor out = Tensor::from_f32(start, {n, out_features});
      LinearFusion fusion;
      fusion.input = input;
      fusion.norm_weight = &tg;
      fusion.eps = eps;
      fusion.accumulate = accumulate;
      backend->fused_linear(tx, fusion, tw, QuantizedWeight(), tb, out);
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> v(in);
        double squares = 0;
        for (int64_t j = 0; j < in; ++j) squares += double(x[i * x_width + j]) * x[i * x_width + j];
        for (int64_t j = 0; j < in; ++j) {
          const double a = x[i * x_width + j];
          if (input == LinearFusion::Input::kAsIs) v[j] = a;
          if (input == LinearFusion::Input::kRmsNorm) v[j] = a / std::sqrt(squares / in + eps) * g[j];
          if (input == LinearFusion::Input::kSiluMul) v[j] = a / (1 + std::exp(-a)) * x[i * x_width + in + j];
        }
        for (int64_t o = 0; o < out_features; ++o) {
          double expected = b[o] + (accumulate ? start[i * out_features + o] : 0.0);
          for (int64_t j = 0; j < in; ++j) expected += v[j] * w[o * in + j];
          EXPECT_NEAR(out.data<float>()[i * out_features + o], expected, 1e-4)
              << "input " << static_cast<int>(input) << " accumulate " << accumulate << " row " << i << " out " << o;
        }
      }
    }
  }
}

TEST(Compare, CatchesAPlantedError) {
  // The closeness check itself must be able to fail: a single changed value,
  // or a NaN, is reported outside the bounds the tests use.
  auto a = random_vector(1000, 9);
  auto b = a;
  EXPECT_TRUE(testing::compare(b.data(), a.data(), a.size()).within(1e-6, 1e-6));
  b[500] += 0.01f;
  EXPECT_FALSE(testing::compare(b.data(), a.data(), a.size()).within(2e-3, 1e-4));
  b[500] = NAN;
  EXPECT_FALSE(testing::compare(b.data(), a.data(), a.size()).within(1e30, 1e30));
}

}  // namespace
}  // namespace tessera::backend
