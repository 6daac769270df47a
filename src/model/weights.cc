#include "model/weights.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "model/loader/fp8.h"
#include "model/loader/gptq.h"
#include "model/loader/quantized_linear.h"

namespace tessera::model {

namespace {

std::string with_layer(const std::string& pattern, int64_t layer) {
  std::string out = pattern;
  size_t at = out.find("{L}");
  if (at != std::string::npos) out.replace(at, 3, std::to_string(layer));
  return out;
}

// Expected shape of a canonical weight and the row range each part fills.
struct CanonicalLayout {
  Shape shape;
  int64_t row_begin = 0;  // of the part being filled
  int64_t row_count = 0;
};

Shape canonical_shape(const ModelSpec& spec, const std::string& name) {
  const int64_t h = spec.hidden_size;
  if (name == "embed" || name == "lm_head") return {spec.vocab_size, h};
  if (name == "final_norm" || name.ends_with(".attn_norm") || name.ends_with(".ffn_norm")) return {h};
  if (name.ends_with(".qkv")) return {spec.qkv_size(), h};
  if (name.ends_with(".qkv_bias")) return {spec.qkv_size()};
  if (name.ends_with(".q_norm") || name.ends_with(".k_norm")) return {spec.head_dim};
  if (name.ends_with(".o")) return {h, spec.q_size()};
  if (name.ends_with(".gate_up")) return {2 * spec.intermediate_size, h};
  if (name.ends_with(".down")) return {h, spec.intermediate_size};
  throw Error(ErrorKind::kInternal, "no canonical shape for weight " + name);
}

// Rows [begin, begin + count) of the canonical tensor that `part` fills.
std::pair<int64_t, int64_t> part_rows(const ModelSpec& spec, WeightPart part, int64_t total_rows) {
  const int64_t q = spec.q_size(), kv = spec.kv_size(), inter = spec.intermediate_size;
  switch (part) {
    case WeightPart::kQ: return {0, q};
    case WeightPart::kK: return {q, kv};
    case WeightPart::kV: return {q + kv, kv};
    case WeightPart::kGate: return {0, inter};
    case WeightPart::kUp: return {inter, inter};
    case WeightPart::kWhole:
    case WeightPart::kPackedWqkv: return {0, total_rows};
  }
  return {0, total_rows};
}

// Converts `rows` rows of `width` values from a checkpoint tensor into f32.
void copy_rows_f32(const Tensor& source, int64_t source_row, float* destination, int64_t rows, int64_t width) {
  const size_t element_bytes = dtype_bytes(source.dtype(), 1);
  const auto* base = static_cast<const char*>(source.raw_data()) + source_row * width * element_bytes;
  convert_to_f32(source.dtype(), base, destination, static_cast<size_t>(rows * width));
}

// InternLM2's wqkv rows: for each KV head g, [group query heads, key head g,
// value head g], each head_dim rows. Scatter them into q | k | v.
void unpack_internlm2_wqkv(const ModelSpec& spec, const Tensor& source, float* qkv) {
  const int64_t hd = spec.head_dim, width = spec.hidden_size;
  const int64_t group = spec.num_heads / spec.num_kv_heads;
  int64_t source_head = 0;
  for (int64_t g = 0; g < spec.num_kv_heads; ++g) {
    for (int64_t i = 0; i < group; ++i) {
      copy_rows_f32(source, source_head++ * hd, qkv + (g * group + i) * hd * width, hd, width);
    }
    copy_rows_f32(source, source_head++ * hd, qkv + (spec.q_size() + g * hd) * width, hd, width);
    copy_rows_f32(source, source_head++ * hd, qkv + (spec.q_size() + spec.kv_size() + g * hd) * width, hd, width);
  }
}

class WeightAssembler {
 public:
  WeightAssembler(const ModelSpec& spec, const Checkpoint& checkpoint) : spec_(spec), checkpoint_(checkpoint) {}

  // Fills `part` of canonical weight `name` from checkpoint tensor `source_name`.
  void fill(const std::string& name, WeightPart part, const std::string& source_name) {
    if (spec_.quantization.four_bit() && source_name.ends_with(".weight") && is_linear(name)) {
      const std::string base = source_name.substr(0, source_name.size() - 7);
      if (has_quantized_linear(checkpoint_, base)) {
        if (spec_.quantization.kept_four_bit()) return fill_quantized(name, part, base);
        // Act-order GPTQ: the part's rows dequantized, then placed as 16-bit rows are.
        const Shape full = canonical_shape(spec_, name);
        const int64_t rows = part_rows(spec_, part, full[0]).second;
        const Tensor dense = dequantize_gptq_linear(checkpoint_, base, rows, full[1], spec_.quantization);
        return fill_rows(name, part, dense, checkpoint_.dir().string(), base + ".qweight");
      }
    }
    const CheckpointTensor& source = checkpoint_.get(source_name);
    if (source.tensor.dtype() == DType::kF8E4M3) {
      if (!is_linear(name)) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("{}: tensor '{}' is FP8 (F8_E4M3), but only linear layers may be", source.file,
                                source_name),
                    "embeddings, norms and the LM head of an FP8 export stay 16-bit; is the checkpoint complete?");
      }
      // FP8 linears: dequantized with their block scales, then placed as 16-bit rows are.
      return fill_rows(name, part, dequantize_fp8_linear(checkpoint_, source_name, spec_.quantization), source.file,
                       source_name);
    }
    fill_rows(name, part, source.tensor, source.file, source_name);
  }

  std::map<std::string, Tensor> take_all() {
    for (const auto& [name, tensor] : tensors_) {
      if (tensors_.contains(name + ".qweight")) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("{}: {} has both 4-bit and 16-bit parts (q/k/v or gate/up stored differently)",
                                checkpoint_.dir().string(), name),
                    "quantize every part of a fused linear alike");
      }
    }
    return std::move(tensors_);
  }

 private:
  Tensor& tensor_for(const std::string& name) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) it = tensors_.emplace(name, Tensor::empty(canonical_shape(spec_, name), DType::kF32)).first;
    return it->second;
  }

  static bool is_linear(const std::string& name) {
    return name.ends_with(".qkv") || name.ends_with(".o") || name.ends_with(".gate_up") || name.ends_with(".down");
  }

  // A 16-bit (or dequantized) part `source` of canonical weight `name`,
  // checked against the shape config.json implies; `file` and `source_name`
  // name it in errors.
  void fill_rows(const std::string& name, WeightPart part, const Tensor& source, const std::string& file,
                 const std::string& source_name) {
    Tensor& target = tensor_for(name);
    const int64_t width = target.rank() == 2 ? target.dim(1) : 1;
    auto [row_begin, row_count] = part_rows(spec_, part, target.dim(0));
    Shape expected = target.rank() == 2 ? Shape{row_count, width} : Shape{row_count};
    if (source.shape() != expected) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: tensor '{}' has shape {}, but config.json implies {}", file, source_name,
                              shape_to_string(source.shape()), shape_to_string(expected)),
                  "the weights do not match config.json; is the checkpoint complete and the config its own?");
    }
    if (!dtype_is_float(source.dtype())) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: tensor '{}' has dtype {}, expected a float type", file,
                                                           source_name, dtype_name(source.dtype())));
    }
    float* destination = target.data<float>() + row_begin * width;
    if (part == WeightPart::kPackedWqkv) {
      unpack_internlm2_wqkv(spec_, source, destination);
    } else {
      copy_rows_f32(source, 0, destination, row_count, width);
    }
  }

  // A 4-bit part: read and repacked (loader/quantized_linear.h) into the canonical
  // layout's rows, so q | k | v, gate | up and InternLM2's head groups are
  // placed exactly as the 16-bit rows are.
  void fill_quantized(const std::string& name, WeightPart part, const std::string& base) {
    const Shape full = canonical_shape(spec_, name);
    const int64_t width = full[1], group = spec_.quantization.group_size;
    auto [row_begin, row_count] = part_rows(spec_, part, full[0]);
    backend::QuantizedWeight q = read_quantized_linear(checkpoint_, base, row_count, width, spec_.quantization);
    Tensor* targets[3] = {&part_for(name + ".qweight", {full[0], width / 8}, DType::kI32),
                          &part_for(name + ".scales", {full[0], width / group}, DType::kF16),
                          &part_for(name + ".zeros", {full[0], width / group}, DType::kU8)};
    const Tensor* sources[3] = {&q.qweight, &q.scales, &q.zeros};
    auto move_rows = [&](int64_t from, int64_t to, int64_t count) {
      for (int i = 0; i < 3; ++i) {
        const size_t row_bytes = sources[i]->nbytes() / static_cast<size_t>(sources[i]->dim(0));
        std::memcpy(static_cast<char*>(targets[i]->raw_data()) + to * row_bytes,
                    static_cast<const char*>(sources[i]->raw_data()) + from * row_bytes, count * row_bytes);
      }
    };
    if (part != WeightPart::kPackedWqkv) return move_rows(0, row_begin, row_count);
    // InternLM2's wqkv, as unpack_internlm2_wqkv does for 16-bit rows.
    const int64_t hd = spec_.head_dim, group_heads = spec_.num_heads / spec_.num_kv_heads;
    int64_t source_head = 0;
    for (int64_t g = 0; g < spec_.num_kv_heads; ++g) {
      for (int64_t i = 0; i < group_heads; ++i) move_rows(source_head++ * hd, (g * group_heads + i) * hd, hd);
      move_rows(source_head++ * hd, spec_.q_size() + g * hd, hd);
      move_rows(source_head++ * hd, spec_.q_size() + spec_.kv_size() + g * hd, hd);
    }
  }

  Tensor& part_for(const std::string& name, Shape shape, DType dtype) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) it = tensors_.emplace(name, Tensor::empty(std::move(shape), dtype)).first;
    return it->second;
  }

  const ModelSpec& spec_;
  const Checkpoint& checkpoint_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace

CanonicalWeights assemble_part(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint,
                               int64_t part) {
  if (part != kGlobalWeights && (part < 0 || part >= spec.num_layers)) {
    throw Error(ErrorKind::kInternal, fmt::format("weights: no layer {} in a {}-layer model", part, spec.num_layers));
  }
  WeightAssembler assembler(spec, checkpoint);
  for (const WeightSource& source : arch.sources) {
    const bool per_layer = source.checkpoint_pattern.find("{L}") != std::string::npos;
    if (per_layer != (part != kGlobalWeights)) continue;
    const int64_t layer = per_layer ? part : 0;
    const std::string source_name = with_layer(source.checkpoint_pattern, layer);
    if (source.optional && !checkpoint.contains(source_name)) continue;
    if (source.canonical_pattern == "lm_head" && spec.tie_word_embeddings) continue;
    assembler.fill(with_layer(source.canonical_pattern, layer), source.part, source_name);
  }
  CanonicalWeights weights = assembler.take_all();
  if (part == kGlobalWeights && !weights.contains("lm_head") && !spec.tie_word_embeddings) {
    log_warning("{}: no LM head tensor in the checkpoint; using the embeddings (tied)", checkpoint.dir().string());
  }
  return weights;
}

CanonicalWeights assemble_weights(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint) {
  CanonicalWeights weights = assemble_part(spec, arch, checkpoint, kGlobalWeights);
  for (int64_t layer = 0; layer < spec.num_layers; ++layer) weights.merge(assemble_part(spec, arch, checkpoint, layer));
  return weights;
}

namespace {

// Logs the upload's progress at most every kEvery seconds (the caller logs its end).
class UploadProgress {
 public:
  UploadProgress(const ModelSpec& spec, const backend::Backend& backend, bool enabled)
      : spec_(spec), device_(backend.device().to_string()), enabled_(enabled) {}

  void add(const Tensor& uploaded) {
    if (uploaded.defined()) bytes_ += static_cast<double>(uploaded.nbytes());
  }
  void add(const backend::QuantizedWeight& uploaded) {
    add(uploaded.qweight);
    add(uploaded.scales);
    add(uploaded.zeros);
    add(uploaded.gemm_qweight);
    add(uploaded.gemm_scales);
    add(uploaded.gemm_zeros);
  }
  void layer_done(int64_t layers) {
    if (!enabled_ || seconds() < next_) return;
    next_ = seconds() + kEvery;
    log_info("loading weights onto {}: {}/{} layers, {:.1f} GB, {:.0f} s", device_, layers, spec_.num_layers,
             bytes_ / 1e9, seconds());
  }

 private:
  static constexpr double kEvery = 5.0;
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

  const ModelSpec& spec_;
  std::string device_;
  bool enabled_;
  double bytes_ = 0, next_ = kEvery;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

ModelWeights upload_weights(const ModelSpec& spec, const WeightParts& parts, const TpShard& shard,
                            backend::Backend& backend, bool log_progress) {
  UploadProgress progress(spec, backend, log_progress);
  if (log_progress && spec.quantization.four_bit() && !spec.quantization.kept_four_bit()) {
    log_warning("act-order GPTQ (desc_act true): its 4-bit linears are dequantized to 16-bit as they load, so they "
                 "take 16-bit memory and run the 16-bit kernels; an export with desc_act false stays 4-bit");
  }
  if (log_progress && spec.quantization.fp8()) {
    log_warning("FP8 weights: tessera has no FP8 kernels yet, so the FP8 linears are dequantized to 16-bit as they "
                "load: they take 16-bit memory (twice the checkpoint's) and run the 16-bit kernels");
  }
  if (spec.quantization.kept_four_bit() && spec.quantization.group_size > 0) {
    // This rank's weights and its 4-bit linears' bytes (16-bit for the rest),
    // for a backend that would keep the 4-bit ones twice.
    const int64_t packed = spec.num_layers * spec.quantization.packed_bytes(shard.linear_params_per_layer(spec));
    const int64_t dense = 2 * spec.vocab_size * spec.hidden_size * (spec.tie_word_embeddings ? 1 : 2);
    backend.plan_quantized_copies(static_cast<size_t>(packed + dense), static_cast<size_t>(packed));
  }
  CanonicalWeights weights = parts(kGlobalWeights);
  auto find = [&](const std::string& name) {
    auto it = weights.find(name);
    return it == weights.end() ? Tensor() : it->second;
  };
  auto upload = [&](const std::string& name, const Tensor& full) {
    Tensor device = backend.upload_weight(shard_weight(spec, shard, name, full));
    progress.add(device);
    return device;
  };
  ModelWeights out;
  out.embed = upload("embed", find("embed"));
  out.final_norm = upload("final_norm", find("final_norm"));
  Tensor lm_head = find("lm_head");
  if (lm_head.defined()) {
    out.lm_head = upload("lm_head", lm_head);
  } else if (shard.world_size == 1) {
    out.lm_head = out.embed;  // tied: one tensor
  } else {
    out.lm_head = upload("lm_head", find("embed"));  // tied: this rank's rows of the embeddings
  }
  for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
    weights.clear();  // the previous part's host tensors go before the next is read
    weights = parts(layer);
    auto take = [&](const char* part) {
      const std::string name = with_layer(std::string("layers.{L}.") + part, layer);
      Tensor full = find(name);
      return full.defined() ? upload(name, full) : Tensor();
    };
    LayerWeights lw;
    lw.attn_norm = take("attn_norm");
    lw.qkv = take("qkv");
    lw.qkv_bias = take("qkv_bias");
    lw.q_norm = take("q_norm");
    lw.k_norm = take("k_norm");
    lw.o = take("o");
    lw.ffn_norm = take("ffn_norm");
    lw.gate_up = take("gate_up");
    lw.down = take("down");
    // 4-bit linears: packed on a backend with a 4-bit kernel, else dequantized
    // into the 16-bit slot (the CPU computes in f32).
    auto take_quantized = [&](const char* part, Tensor& dense, backend::QuantizedWeight& packed) {
      const std::string name = with_layer(std::string("layers.{L}.") + part, layer);
      if (dense.defined() || !weights.contains(name + ".qweight")) return;
      backend::QuantizedWeight q;
      q.qweight = shard_weight(spec, shard, name + ".qweight", find(name + ".qweight"));
      q.scales = shard_weight(spec, shard, name + ".scales", find(name + ".scales"));
      q.zeros = shard_weight(spec, shard, name + ".zeros", find(name + ".zeros"));
      q.out_features = q.qweight.dim(0);
      q.in_features = q.qweight.dim(1) * 8;
      q.group_size = q.in_features / q.scales.dim(1);
      q.gate_up_halves = std::string_view(part) == "gate_up";  // each rank's gate units, then its up units
      backend::check_quantized_weight(q, name);
      if (backend.supports_quantized_linear()) {
        packed = backend.upload_quantized_weight(q);
        progress.add(packed);
      } else {
        dense = backend.upload_weight(backend::dequantize_weight(q));
        progress.add(dense);
      }
    };
    take_quantized("qkv", lw.qkv, lw.qkv_w4);
    take_quantized("o", lw.o, lw.o_w4);
    take_quantized("gate_up", lw.gate_up, lw.gate_up_w4);
    take_quantized("down", lw.down, lw.down_w4);
    out.layers.push_back(std::move(lw));
    progress.layer_done(layer + 1);
  }
  return out;
}

ModelWeights load_weights(const ModelSpec& spec, const Architecture& arch, const Checkpoint& checkpoint,
                          backend::Backend& backend) {
  return upload_weights(
      spec, [&](int64_t part) { return assemble_part(spec, arch, checkpoint, part); }, make_tp_shard(spec, 0, 1),
      backend, true);
}

}  // namespace tessera::model
