#include "model/convert/awq_scales.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "backend/quantized_weight.h"
#include "core/error.h"
#include "core/log.h"
#include "model/convert/awq_quantize.h"
#include "model/forward_batch.h"

namespace tessera::model {

namespace {

// Adds the sampled rows [n, dim] of one input (sample_index: each row's
// index among all sampled rows); every `search_stride`-th is kept for the
// search, up to kSearchRows.
void add_rows(LinearInputs& inputs, const float* x, int64_t n, int64_t dim, int64_t sample_index,
              int64_t search_stride) {
  if (inputs.abs_sum.empty()) inputs.abs_sum.assign(dim, 0.0);
  TESSERA_CHECK(static_cast<int64_t>(inputs.abs_sum.size()) == dim);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * dim;
    for (int64_t j = 0; j < dim; ++j) inputs.abs_sum[j] += std::fabs(row[j]);
    if ((sample_index + t) % search_stride == 0 && inputs.row_count < kSearchRows) {
      inputs.rows.insert(inputs.rows.end(), row, row + dim);
      ++inputs.row_count;
    }
  }
  inputs.tokens += n;
}

// rms_norm(x) · weight, row by row, as the linear layer forms its input.
std::vector<float> normed(const Tensor& x, const Tensor& weight, float eps) {
  const int64_t n = x.dim(0), dim = x.dim(1);
  const float* in = x.data<float>();
  const float* g = weight.data<float>();
  std::vector<float> out(n * dim);
  for (int64_t t = 0; t < n; ++t) {
    double squares = 0.0;
    for (int64_t j = 0; j < dim; ++j) squares += double(in[t * dim + j]) * in[t * dim + j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(squares / dim) + eps);
    for (int64_t j = 0; j < dim; ++j) out[t * dim + j] = in[t * dim + j] * inv * g[j];
  }
  return out;
}

// silu(gate) · up of gate_up rows [n, 2 · inter].
std::vector<float> silu_mul(const Tensor& gate_up) {
  const int64_t n = gate_up.dim(0), inter = gate_up.dim(1) / 2;
  const float* in = gate_up.data<float>();
  std::vector<float> out(n * inter);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < inter; ++j) {
      const float g = in[t * 2 * inter + j], u = in[t * 2 * inter + inter + j];
      out[t * inter + j] = g / (1.0f + std::exp(-g)) * u;
    }
  }
  return out;
}

// Σ (a - b)² over two host f32 tensors of one shape.
double squared_error(const Tensor& a, const Tensor& b) {
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  double sum = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) sum += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  return sum;
}

// round_to_nearest(W · diag(s)) · diag(1/s): what the 4-bit model computes with.
Tensor scaled_round_trip(const Tensor& weight, const std::vector<float>& s, int64_t group_size) {
  const int64_t out = weight.dim(0), in = weight.dim(1);
  Tensor scaled = Tensor::empty({out, in}, DType::kF32);
  const float* w = weight.data<float>();
  float* ws = scaled.data<float>();
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t j = 0; j < in; ++j) ws[o * in + j] = w[o * in + j] * s[j];
  }
  Tensor round_trip = backend::dequantize_weight(quantize_rtn(scaled, group_size)).to_f32();
  float* r = round_trip.data<float>();
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t j = 0; j < in; ++j) r[o * in + j] /= s[j];
  }
  return round_trip;
}

}  // namespace

std::vector<LayerInputs> collect_linear_inputs(Transformer& model, const LayerNorms& norms,
                                               const std::vector<std::vector<int32_t>>& sequences,
                                               int64_t batch_size) {
  const ModelSpec& spec = model.spec();
  int64_t total = 0, longest = 0;
  for (const auto& seq : sequences) {
    total += static_cast<int64_t>(seq.size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(seq.size()));
  }
  if (total == 0) {
    throw Error(ErrorKind::kInvalidArgument, "the calibration text encodes to no tokens",
                "give a --calib-text file with some text in it");
  }
  TESSERA_CHECK(static_cast<int64_t>(norms.attn.size()) == spec.num_layers &&
                static_cast<int64_t>(norms.ffn.size()) == spec.num_layers);
  // Evenly spaced tokens, at most kStatisticRows, are gathered where the
  // model runs and copied to the host: a GPU's whole activations of every
  // layer would cost far more copying and host work than the forwards.
  const int64_t stride = std::max<int64_t>(1, (total + kStatisticRows - 1) / kStatisticRows);
  const int64_t sampled = (total + stride - 1) / stride;
  const int64_t search_stride = std::max<int64_t>(1, (sampled + kSearchRows - 1) / kSearchRows);
  std::vector<LayerInputs> inputs(spec.num_layers);
  int64_t first = 0;            // the current sequence's first token among all calibration tokens
  int64_t sample_index = 0;     // its first sampled token's index among all sampled ones
  std::vector<int32_t> picked;  // the current sequence's sampled rows
  backend::Backend& backend = model.backend();
  model.set_trace([&](const std::string& name, int64_t layer, const Tensor& value) {
    const bool layer_input = name == "embedding" || (name == "residual" && layer + 1 < spec.num_layers);
    if (!layer_input && name != "attention" && name != "attention_residual" && name != "gate_up") return;
    if (picked.empty()) return;
    Tensor rows = Tensor::empty({static_cast<int64_t>(picked.size()), value.dim(1)}, value.dtype(), backend.allocator());
    backend.gather_rows(value, picked, rows);
    const Tensor x = backend.to_host_f32(rows);
    const int64_t n = x.dim(0);
    if (layer_input) {
      const int64_t next = name == "embedding" ? 0 : layer + 1;
      add_rows(inputs[next].qkv, normed(x, norms.attn[next], norms.eps).data(), n, x.dim(1), sample_index,
               search_stride);
    } else if (name == "attention") {
      add_rows(inputs[layer].o, x.data<float>(), n, x.dim(1), sample_index, search_stride);
    } else if (name == "attention_residual") {
      add_rows(inputs[layer].gate_up, normed(x, norms.ffn[layer], norms.eps).data(), n, x.dim(1), sample_index,
               search_stride);
    } else {
      add_rows(inputs[layer].down, silu_mul(x).data(), n, x.dim(1) / 2, sample_index, search_stride);
    }
  });
  constexpr int64_t kBlockSize = 64;
  const int64_t per_batch = std::max<int64_t>(1, batch_size);
  const int64_t blocks_per_seq = (longest + kBlockSize - 1) / kBlockSize;
  backend::PagedKvCache cache = model.allocate_cache(per_batch * blocks_per_seq, kBlockSize);
  auto last_log = std::chrono::steady_clock::now();
  try {
    for (size_t begin = 0; begin < sequences.size(); begin += per_batch) {
      // Up to per_batch sequences side by side in one forward, each in its
      // own blocks; the tokens are sequence after sequence, as picked.
      ForwardBatch batch;
      batch.attention.max_blocks_per_seq = static_cast<int32_t>(blocks_per_seq);
      batch.attention.query_start = {0};
      picked.clear();
      for (size_t i = begin; i < std::min(sequences.size(), begin + per_batch); ++i) {
        const std::vector<int32_t>& seq = sequences[i];
        if (seq.empty()) continue;
        const int64_t offset = static_cast<int64_t>(batch.token_ids.size());
        const int64_t slot = batch.attention.num_seqs();
        for (int64_t t = 0; t < static_cast<int64_t>(seq.size()); ++t) {
          if ((first + t) % stride == 0) picked.push_back(static_cast<int32_t>(offset + t));
          batch.attention.positions.push_back(static_cast<int32_t>(t));
        }
        batch.token_ids.insert(batch.token_ids.end(), seq.begin(), seq.end());
        batch.attention.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
        for (int64_t b = 0; b < blocks_per_seq; ++b) {
          batch.attention.block_tables.push_back(static_cast<int32_t>(slot * blocks_per_seq + b));
        }
        batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
        first += static_cast<int64_t>(seq.size());
      }
      if (batch.token_ids.empty()) continue;
      model.forward(batch, cache);
      sample_index += static_cast<int64_t>(picked.size());
      const auto now = std::chrono::steady_clock::now();
      if (now - last_log > std::chrono::seconds(5)) {  // a long calibration says how far it is
        log_info("auto_awq: calibration: {} of {} sequences", std::min(sequences.size(), begin + per_batch),
                 sequences.size());
        last_log = now;
      }
    }
  } catch (...) {
    model.set_trace(nullptr);
    throw;
  }
  model.set_trace(nullptr);
  return inputs;
}

LinearInputs tied_to_kv_heads(const LinearInputs& o_inputs, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  TESSERA_CHECK(static_cast<int64_t>(o_inputs.abs_sum.size()) == heads * head_dim && heads % kv_heads == 0);
  const int64_t group = heads / kv_heads;
  LinearInputs tied = o_inputs;
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int64_t d = 0; d < head_dim; ++d) {
      double sum = 0.0;
      for (int64_t i = 0; i < group; ++i) sum += o_inputs.abs_sum[(g * group + i) * head_dim + d];
      for (int64_t i = 0; i < group; ++i) tied.abs_sum[(g * group + i) * head_dim + d] = sum / group;
    }
  }
  return tied;
}

std::vector<float> kv_scale(const std::vector<float>& o_scale, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  TESSERA_CHECK(static_cast<int64_t>(o_scale.size()) == heads * head_dim);
  std::vector<float> s(kv_heads * head_dim);
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int64_t d = 0; d < head_dim; ++d) s[g * head_dim + d] = o_scale[g * (heads / kv_heads) * head_dim + d];
  }
  return s;
}

std::vector<float> awq_scale(const LinearInputs& inputs, float alpha) {
  const size_t dim = inputs.abs_sum.size();
  std::vector<float> s(dim, 1.0f);
  if (alpha == 0.0f || inputs.tokens == 0) return s;
  float most = 0.0f, least = std::numeric_limits<float>::max();
  for (size_t j = 0; j < dim; ++j) {
    const double mean = std::max(inputs.abs_sum[j] / double(inputs.tokens), 1e-4);
    s[j] = static_cast<float>(std::pow(mean, double(alpha)));
    most = std::max(most, s[j]);
    least = std::min(least, s[j]);
  }
  // Normalised so that the largest and smallest are reciprocal: the scaled
  // weights keep the magnitude of the originals.
  const float norm = std::sqrt(most * least);
  for (float& v : s) v /= norm;
  return s;
}

InputScale choose_input_scale(const Tensor& weight, const LinearInputs& inputs, int64_t group_size, bool search,
                              float alpha, backend::Backend& cpu) {
  TESSERA_CHECK(weight.rank() == 2 && weight.dtype() == DType::kF32);
  const int64_t in = weight.dim(1);
  TESSERA_CHECK(static_cast<int64_t>(inputs.abs_sum.size()) == in);
  InputScale best;
  if (!search) {
    best.alpha = alpha;
    best.s = awq_scale(inputs, alpha);
    return best;
  }
  TESSERA_CHECK(inputs.row_count > 0);
  const Tensor x = Tensor::from_f32(inputs.rows, {inputs.row_count, in});
  Tensor reference = Tensor::empty({inputs.row_count, weight.dim(0)}, DType::kF32);
  cpu.linear(x, weight, Tensor(), reference);
  Tensor approximate = Tensor::empty(reference.shape(), DType::kF32);
  constexpr int kGrid = 20;
  best.error = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kGrid; ++i) {
    const float a = static_cast<float>(i) / kGrid;
    std::vector<float> s = awq_scale(inputs, a);
    cpu.linear(x, scaled_round_trip(weight, s, group_size), Tensor(), approximate);
    const double error = squared_error(reference, approximate);
    if (i == 0) best.rtn_error = error;
    if (error < best.error) {
      best.error = error;
      best.alpha = a;
      best.s = std::move(s);
    }
  }
  return best;
}

Tensor clip_for_rounding(const Tensor& weight, const LinearInputs& inputs, const std::vector<float>& s,
                         int64_t group_size, backend::Backend& cpu, double* gain) {
  TESSERA_CHECK(weight.rank() == 2 && weight.dtype() == DType::kF32 && weight.dim(1) % group_size == 0);
  const int64_t out = weight.dim(0), in = weight.dim(1), rows = inputs.row_count;
  TESSERA_CHECK(rows > 0 && static_cast<int64_t>(inputs.rows.size()) == rows * in);
  Tensor clipped = weight.to_f32();  // a copy
  float* w = clipped.data<float>();
  double total_best = 0.0, total_unclipped = 0.0;
  Tensor x_group = Tensor::empty({rows, group_size}, DType::kF32);
  Tensor w_group = Tensor::empty({out, group_size}, DType::kF32);
  Tensor candidate = Tensor::empty({out, group_size}, DType::kF32);
  Tensor difference = Tensor::empty({out, group_size}, DType::kF32);
  Tensor error_rows = Tensor::empty({rows, out}, DType::kF32);
  constexpr int kRatios = 10;  // r = 1, 0.95, ..., 0.55
  for (int64_t g = 0; g < in / group_size; ++g) {
    float* xg = x_group.data<float>();
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t i = 0; i < group_size; ++i) {
        const int64_t j = g * group_size + i;
        xg[t * group_size + i] = inputs.rows[t * in + j] / (s.empty() ? 1.0f : s[j]);
      }
    }
    float* wg = w_group.data<float>();
    std::vector<float> max_abs(out, 0.0f);
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < group_size; ++i) {
        wg[o * group_size + i] = w[o * in + g * group_size + i];
        max_abs[o] = std::max(max_abs[o], std::fabs(wg[o * group_size + i]));
      }
    }
    std::vector<double> best(out, std::numeric_limits<double>::infinity());
    std::vector<float> best_ratio(out, 1.0f);
    for (int r = 0; r < kRatios; ++r) {
      const float ratio = 1.0f - 0.05f * static_cast<float>(r);
      float* c = candidate.data<float>();
      for (int64_t o = 0; o < out; ++o) {
        const float limit = ratio * max_abs[o];
        for (int64_t i = 0; i < group_size; ++i) {
          c[o * group_size + i] = std::clamp(wg[o * group_size + i], -limit, limit);
        }
      }
      const Tensor rounded = backend::dequantize_weight(quantize_rtn(candidate, group_size)).to_f32();
      const float* q = rounded.data<float>();
      float* d = difference.data<float>();
      for (int64_t e = 0; e < out * group_size; ++e) d[e] = wg[e] - q[e];
      cpu.linear(x_group, difference, Tensor(), error_rows);  // [rows, out]: each row's output error
      const float* err = error_rows.data<float>();
      for (int64_t o = 0; o < out; ++o) {
        double sum = 0.0;
        for (int64_t t = 0; t < rows; ++t) sum += double(err[t * out + o]) * err[t * out + o];
        if (r == 0) total_unclipped += sum;
        if (sum < best[o]) {
          best[o] = sum;
          best_ratio[o] = ratio;
        }
      }
    }
    for (int64_t o = 0; o < out; ++o) {
      total_best += best[o];
      const float limit = best_ratio[o] * max_abs[o];
      for (int64_t i = 0; i < group_size; ++i) {
        float& v = w[o * in + g * group_size + i];
        v = std::clamp(v, -limit, limit);
      }
    }
  }
  if (gain != nullptr) *gain = total_unclipped > 0 ? 1.0 - total_best / total_unclipped : 0.0;
  return clipped;
}

}  // namespace tessera::model
