#include "model/convert/awq_fold.h"

#include <vector>

#include "core/error.h"

namespace tessera::model {

namespace {

// w [rows, cols] f32: columns × s (an input scale), in place.
void scale_columns(Tensor& w, const std::vector<float>& s) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  TESSERA_CHECK(static_cast<int64_t>(s.size()) == cols);
  float* p = w.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) p[r * cols + c] *= s[c];
  }
}

// Rows [first, first + s.size()) of w ÷ s, in place (1-D w: its elements).
void divide_rows(Tensor& w, const std::vector<float>& s, int64_t first) {
  const int64_t cols = w.rank() == 2 ? w.dim(1) : 1;
  TESSERA_CHECK(first + static_cast<int64_t>(s.size()) <= w.dim(0));
  float* p = w.data<float>();
  for (size_t r = 0; r < s.size(); ++r) {
    for (int64_t c = 0; c < cols; ++c) p[(first + r) * cols + c] /= s[r];
  }
}

// v's rows (or bias elements) of a qkv checkpoint tensor ÷ the KV-head scale
// `kv` (awq_scales.h, kv_scale), wherever its part keeps them.
void divide_v_rows(Tensor& w, WeightPart part, const std::vector<float>& kv, const ModelSpec& spec) {
  const int64_t hd = spec.head_dim, group = spec.num_heads / spec.num_kv_heads;
  if (part == WeightPart::kV) return divide_rows(w, kv, 0);
  if (part == WeightPart::kWhole) return divide_rows(w, kv, spec.q_size() + spec.kv_size());
  if (part != WeightPart::kPackedWqkv) return;  // q or k
  for (int64_t g = 0; g < spec.num_kv_heads; ++g) {  // InternLM2: per KV head, its q heads, k, v
    const std::vector<float> head(kv.begin() + g * hd, kv.begin() + (g + 1) * hd);
    divide_rows(w, head, (g * (group + 2) + group + 1) * hd);
  }
}

}  // namespace

std::map<std::string, LayerTensor> layer_tensors(const ModelSpec& spec, const Architecture& arch) {
  std::map<std::string, LayerTensor> tensors;
  const std::string prefix = "layers.{L}.";
  for (const WeightSource& source : arch.sources) {
    if (!source.canonical_pattern.starts_with(prefix)) continue;
    for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
      std::string name = source.checkpoint_pattern;
      name.replace(name.find("{L}"), 3, std::to_string(layer));
      tensors[name] = {layer, source.canonical_pattern.substr(prefix.size()), source.part};
    }
  }
  return tensors;
}

bool is_linear(const LayerTensor& t, const std::string& name) {
  const bool linear = t.canonical == "qkv" || t.canonical == "o" || t.canonical == "gate_up" || t.canonical == "down";
  return linear && name.ends_with(".weight");
}

std::set<std::string> linear_names(const ModelSpec& spec, const Architecture& arch) {
  std::set<std::string> names;
  for (const auto& [name, tensor] : layer_tensors(spec, arch)) {
    if (is_linear(tensor, name)) names.insert(name);
  }
  return names;
}

bool takes_scales(const LayerTensor& t, const std::string& name) {
  if (t.canonical == "qkv_bias") return true;
  return name.ends_with(".weight") && (t.canonical == "attn_norm" || t.canonical == "ffn_norm" ||
                                       t.canonical == "qkv" || t.canonical == "o" || t.canonical == "gate_up" ||
                                       t.canonical == "down");
}

Tensor fold_scales(const Tensor& source, const LayerTensor& t, const LayerScales& scales, const ModelSpec& spec) {
  Tensor w = source.to_f32();
  const int64_t intermediate = spec.intermediate_size;
  const std::vector<float> kv = kv_scale(scales.o.s, spec.num_heads, spec.num_kv_heads, spec.head_dim);
  if (t.canonical == "attn_norm") {
    divide_rows(w, scales.qkv.s, 0);
  } else if (t.canonical == "ffn_norm") {
    divide_rows(w, scales.gate_up.s, 0);
  } else if (t.canonical == "qkv") {
    scale_columns(w, scales.qkv.s);
    divide_v_rows(w, t.part, kv, spec);
  } else if (t.canonical == "qkv_bias") {
    divide_v_rows(w, t.part, kv, spec);
  } else if (t.canonical == "o") {
    scale_columns(w, scales.o.s);
  } else if (t.canonical == "gate_up") {
    scale_columns(w, scales.gate_up.s);
    if (t.part == WeightPart::kUp) divide_rows(w, scales.down.s, 0);
    if (t.part == WeightPart::kWhole) divide_rows(w, scales.down.s, intermediate);
  } else if (t.canonical == "down") {
    scale_columns(w, scales.down.s);
  }
  return w;
}

}  // namespace tessera::model
