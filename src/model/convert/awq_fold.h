// Folding AWQ's input scales (awq_scales.h) into a checkpoint's tensors, by
// the names the architecture's table gives them: a linear layer's input
// columns × s, the tensor that makes its input ÷ s.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "core/tensor.h"
#include "model/arch/architecture.h"
#include "model/convert/awq_scales.h"
#include "model/model_spec.h"

namespace tessera::model {

// A layer's checkpoint tensor: which layer, which canonical weight
// ("qkv", "attn_norm", ...) and which part of it.
struct LayerTensor {
  int64_t layer = 0;
  std::string canonical;
  WeightPart part = WeightPart::kWhole;
};

// Every per-layer checkpoint name of the architecture, by name.
std::map<std::string, LayerTensor> layer_tensors(const ModelSpec& spec, const Architecture& arch);

// Whether checkpoint tensor `name` is the weight of a linear layer (qkv, o, gate_up, down).
bool is_linear(const LayerTensor& t, const std::string& name);

// Checkpoint names of the linear layers (".weight" of qkv, o, gate_up, down sources).
std::set<std::string> linear_names(const ModelSpec& spec, const Architecture& arch);

// Whether a layer's scales change checkpoint tensor `name`: the norms, the
// linear weights, qkv's bias (v's part).
bool takes_scales(const LayerTensor& t, const std::string& name);

// The checkpoint tensor `source` as f32 with its layer's scales folded in:
// attn_norm ÷ s_qkv; qkv's columns × s_qkv and v's rows (and bias) ÷ s_o's
// KV-head scale; o's columns × s_o; ffn_norm ÷ s_gate_up; gate_up's columns
// × s_gate_up and up's rows ÷ s_down; down's columns × s_down.
Tensor fold_scales(const Tensor& source, const LayerTensor& t, const LayerScales& scales, const ModelSpec& spec);

}  // namespace tessera::model
