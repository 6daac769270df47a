#include "backend/cpu/kernels.h"

#include <cblas.h>
#include <omp.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace tessera::backend::cpu {

void embedding(const float* table, int64_t vocab, int64_t hidden, const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("token id {} is outside the vocabulary [0, {})", ids[i], vocab));
    }
  }
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * hidden, table + static_cast<int64_t>(ids[i]) * hidden, hidden * sizeof(float));
  }
}

static void rms_norm_row(const float* x, const float* weight, int64_t hidden, float eps, float* out) {
  double sum_squares = 0.0;
  for (int64_t j = 0; j < hidden; ++j) sum_squares += static_cast<double>(x[j]) * x[j];
  float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_squares / hidden) + eps);
  for (int64_t j = 0; j < hidden; ++j) out[j] = x[j] * inv_rms * weight[j];
}

void rms_norm(const float* x, const float* weight, int64_t n, int64_t hidden, float eps, float* out) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) rms_norm_row(x + i * hidden, weight, hidden, eps, out + i * hidden);
}

void head_rms_norm(float* qkv, int64_t n, int64_t row_size, int64_t num_heads, int64_t num_kv_heads,
                   int64_t head_dim, const float* q_weight, const float* k_weight, float eps) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < num_heads + num_kv_heads; ++h) {
      float* head = qkv + i * row_size + h * head_dim;
      rms_norm_row(head, h < num_heads ? q_weight : k_weight, head_dim, eps, head);  // reads x[j] before writing it
    }
  }
}

void add_rms_norm(float* residual, const float* x, const float* weight, int64_t n, int64_t hidden, float eps,
                  float* out) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    float* r = residual + i * hidden;
    const float* xi = x + i * hidden;
    for (int64_t j = 0; j < hidden; ++j) r[j] += xi[j];
    rms_norm_row(r, weight, hidden, eps, out + i * hidden);
  }
}

void linear(const float* x, const float* w, const float* bias, int64_t m, int64_t n, int64_t k, float* y) {
  if (m == 0 || n == 0) return;
  // One thread pool, OpenMP's: OpenBLAS runs single-threaded inside each
  // OpenMP thread, which takes a slice of the output columns. Two pools (OpenBLAS
  // pthreads beside spinning OpenMP workers) fight over the cores and were
  // measured 4x slower at batch-1 decode.
  static std::once_flag single_threaded_blas;
  std::call_once(single_threaded_blas, [] { openblas_set_num_threads(1); });
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int64_t per_thread = (n + threads - 1) / threads;
    const int64_t begin = std::min(n, thread * per_thread), end = std::min(n, begin + per_thread);
    if (begin < end) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(end - begin),
                  static_cast<int>(k), 1.0f, x, static_cast<int>(k), w + begin * k, static_cast<int>(k), 0.0f,
                  y + begin, static_cast<int>(n));
      if (bias != nullptr) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = begin; j < end; ++j) y[i * n + j] += bias[j];
        }
      }
    }
  }
}

void rope_rotate(float* x, int64_t head_dim, int32_t position, const float* inv_freq, float scaling) {
  int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // f32 angle, as transformers computes it, so long positions round alike.
    float angle = static_cast<float>(position) * inv_freq[i];
    float c = std::cos(angle) * scaling;
    float s = std::sin(angle) * scaling;
    float x1 = x[i];
    float x2 = x[i + half];
    x[i] = x1 * c - x2 * s;
    x[i + half] = x2 * c + x1 * s;
  }
}

namespace {

// attend_one over any cache: key(p) and value(p) give position p's rows as f32.
template <typename KeyRow, typename ValueRow>
void attend(const float* q, int64_t head_dim, int64_t first, int64_t last, KeyRow key, ValueRow value, float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  int64_t count = last - first + 1;
  std::vector<float> scores(static_cast<size_t>(std::max<int64_t>(count, 0)));
  float max_score = -INFINITY;
  for (int64_t p = first; p <= last; ++p) {
    const float* k = key(p);
    float dot = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) dot += q[d] * k[d];
    scores[p - first] = dot * scale;
    max_score = std::max(max_score, scores[p - first]);
  }
  double denominator = 0.0;
  for (float& s : scores) {
    s = std::exp(s - max_score);
    denominator += s;
  }
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t p = first; p <= last; ++p) {
    const float* v = value(p);
    float weight = static_cast<float>(scores[p - first] / denominator);
    for (int64_t d = 0; d < head_dim; ++d) out[d] += weight * v[d];
  }
}

}  // namespace

void attend_one(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_table,
                int64_t num_kv_heads, int64_t kv_head, int64_t block_size, int64_t head_dim, int64_t first,
                int64_t last, float* out) {
  auto row = [&](const float* cache, int64_t position) {
    int64_t block = block_table[position / block_size];
    return cache + ((block * num_kv_heads + kv_head) * block_size + position % block_size) * head_dim;
  };
  attend(q, head_dim, first, last, [&](int64_t p) { return row(k_cache, p); },
         [&](int64_t p) { return row(v_cache, p); }, out);
}

void attend_one_quantized(const float* q, int bits, const uint8_t* k_codes, const float* k_params,
                          const uint8_t* v_codes, const float* v_params, const int32_t* block_table,
                          int64_t num_kv_heads, int64_t kv_head, int64_t block_size, int64_t head_dim, int64_t first,
                          int64_t last, float* out) {
  std::vector<float> k(static_cast<size_t>(head_dim)), v(static_cast<size_t>(head_dim));
  const int64_t row_bytes = head_dim * bits / 8;
  auto row = [&](int64_t position) {
    int64_t block = block_table[position / block_size];
    return (block * num_kv_heads + kv_head) * block_size + position % block_size;
  };
  attend(
      q, head_dim, first, last,
      [&](int64_t p) {
        dequantize_row(k_codes + row(p) * row_bytes, k_params + row(p) * 2, head_dim, bits, k.data());
        return k.data();
      },
      [&](int64_t p) {
        dequantize_row(v_codes + row(p) * row_bytes, v_params + row(p) * 2, head_dim, bits, v.data());
        return v.data();
      },
      out);
}

void quantize_row(const float* x, int64_t n, int bits, uint8_t* codes, float* params) {
  const float levels = static_cast<float>((1 << bits) - 1);
  const auto [low, high] = std::minmax_element(x, x + n);
  const float zero = *low, scale = (*high - *low) / levels;
  auto code_of = [&](int64_t i) {
    const float code = scale > 0.0f ? std::nearbyint((x[i] - zero) / scale) : 0.0f;
    return static_cast<uint8_t>(std::clamp(code, 0.0f, levels));
  };
  if (bits == 8) {
    for (int64_t i = 0; i < n; ++i) codes[i] = code_of(i);
  } else {
    for (int64_t i = 0; i < n; i += 2) codes[i / 2] = static_cast<uint8_t>(code_of(i) | code_of(i + 1) << 4);
  }
  params[0] = scale;
  params[1] = zero;
}

void dequantize_row(const uint8_t* codes, const float* params, int64_t n, int bits, float* x) {
  for (int64_t i = 0; i < n; ++i) {
    const int code = bits == 8 ? codes[i] : (codes[i / 2] >> (4 * (i % 2))) & 0xF;
    x[i] = std::fmaf(static_cast<float>(code), params[0], params[1]);
  }
}

void silu_mul(const float* gate_up, int64_t n, int64_t inter, float* out) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const float* gate = gate_up + i * 2 * inter;
    const float* up = gate + inter;
    float* o = out + i * inter;
    for (int64_t j = 0; j < inter; ++j) o[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];
  }
}

}  // namespace tessera::backend::cpu
