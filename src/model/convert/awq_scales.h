// Activation-aware scaling for `tessera lite auto_awq` (the "A" of AWQ).
//
// A few input channels of each linear layer carry much larger activations
// than the rest, and rounding their weights costs the output most. Before
// rounding, AWQ multiplies every input channel j of a layer's weight by
// s_j = mean|x_j|^α (normalised so that max·min = 1) and divides the
// operation that produces the input by the same s, which leaves the 16-bit
// model's function unchanged (up to rounding of the divided tensor) and
// gives the salient channels more of each group's 16 levels. Done here for
// the four inputs of a layer, each absorbed by what makes it:
//   qkv     (input: attn_norm(x))        s folded into attn_norm's weight
//   o       (input: attention over v)    s folded into v's rows (and bias)
//   gate_up (input: ffn_norm(x))         s folded into ffn_norm's weight
//   down    (input: silu(gate) · up)     s folded into up's rows
// o's input channel (query head h, d) is a weighted sum of v's channel (KV
// head of h, d), so under GQA the query heads of one KV head share a scale:
// their mean|x| is averaged before s is formed (tied_to_kv_heads). AutoAWQ
// scales o only where v and o have the same shape (no GQA); the tie makes
// it exact for any group.
//
// α is 0.5 by default, or searched per layer and input over 0, 0.05, ...,
// 0.95 (`--search-scale`): the α whose round-to-nearest weights give the
// smallest squared error of the layer's output on calibration activations.
// The activations come from the 16-bit model run on the calibration tokens
// (up to kStatisticRows evenly spaced tokens for mean|x|, kSearchRows of
// those for the search). The search also clips (AWQ's second search): each
// group of each output row is clamped to ±r·max|w| before rounding, r the
// one of 1, 0.95, ..., 0.55 with the least error of that row's output from
// that group's inputs, which trades a few extreme weights for finer steps
// for the rest. Not for qkv, whose errors the attention scores amplify
// (AutoAWQ leaves q and k unclipped too).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/transformer.h"
#include "model/weights.h"

namespace tessera::model {

// The activations of one linear layer's input on the calibration tokens.
struct LinearInputs {
  std::vector<double> abs_sum;  // [in] Σ|x_j| over the sampled tokens
  int64_t tokens = 0;           // how many
  std::vector<float> rows;      // [row_count, in] f32, evenly spaced among them
  int64_t row_count = 0;
};

struct LayerInputs {
  LinearInputs qkv, o, gate_up, down;
};

constexpr int64_t kStatisticRows = 8192;  // tokens mean|x| is taken over, at most
constexpr int64_t kSearchRows = 256;      // tokens the searches measure errors on, at most

// Runs `model` (tp 1, any backend) over the calibration sequences,
// batch_size of them a forward, and gathers
// its layers' linear inputs at up to kStatisticRows tokens spread evenly
// over all of them (mean|x|), and kSearchRows of those (the searches). `norms` holds each layer's
// attn_norm and ffn_norm weights (host f32) and eps, since the inputs are
// formed inside the linear layers. Throws Error(kInvalidArgument) when there
// is no token.
struct LayerNorms {
  std::vector<Tensor> attn, ffn;  // [layers] of [hidden]
  float eps = 1e-5f;
};
std::vector<LayerInputs> collect_linear_inputs(Transformer& model, const LayerNorms& norms,
                                               const std::vector<std::vector<int32_t>>& sequences,
                                               int64_t batch_size = 1);

// The scale of each input channel of one linear layer and the α it came from.
struct InputScale {
  std::vector<float> s;
  float alpha = 0.0f;
  double error = 0.0, rtn_error = 0.0;  // squared output error at α and at α = 0 (searched only)
};
struct LayerScales {
  InputScale qkv, o, gate_up, down;
};

// o's inputs with mean|x| of channel (h, d) replaced by the mean over the
// query heads sharing h's KV head: a scale formed from them is one per
// (KV head, d), which v's rows can absorb.
LinearInputs tied_to_kv_heads(const LinearInputs& o_inputs, int64_t heads, int64_t kv_heads, int64_t head_dim);

// The scale of v's row (KV head g, d) from o's tied scale: that of query head g · group.
std::vector<float> kv_scale(const std::vector<float>& o_scale, int64_t heads, int64_t kv_heads, int64_t head_dim);

// s = mean|x|^α normalised to max·min = 1 (channels with mean|x| below 1e-4
// taken at 1e-4).
std::vector<float> awq_scale(const LinearInputs& inputs, float alpha);

// The scale for `weight` (f32 [out, in]) and its inputs: α = `alpha`, or
// (search) the α of the grid with the least squared error of x·Ŵᵀ against
// x·Wᵀ over the sampled rows, where Ŵ = round_to_nearest(W·diag(s)) ·
// diag(1/s) in groups of `group_size`. `cpu` computes the products.
InputScale choose_input_scale(const Tensor& weight, const LinearInputs& inputs, int64_t group_size, bool search,
                              float alpha, backend::Backend& cpu);

// `weight` (f32 [out, in], its input channels already × s) with every
// (row, group) clamped as the search above chose, against the inputs ÷ s (s
// empty: unscaled). `gain`, when given, gets 1 - error / unclipped error
// summed over the rows and groups.
Tensor clip_for_rounding(const Tensor& weight, const LinearInputs& inputs, const std::vector<float>& s,
                         int64_t group_size, backend::Backend& cpu, double* gain = nullptr);

}  // namespace tessera::model
