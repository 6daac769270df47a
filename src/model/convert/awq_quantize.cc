#include "model/convert/awq_quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "model/arch/architecture.h"
#include "model/convert/awq_fold.h"
#include "model/convert/awq_scales.h"
#include "model/convert/safetensors_writer.h"
#include "model/loader/awq.h"
#include "model/loader/checkpoint.h"
#include "model/loader/hf_config.h"
#include "model/transformer.h"

namespace tessera::model {

backend::QuantizedWeight quantize_rtn(const Tensor& weight, int64_t group_size) {
  TESSERA_CHECK(weight.rank() == 2 && weight.dtype() == DType::kF32 && weight.contiguous());
  const int64_t out = weight.dim(0), in = weight.dim(1), groups = in / group_size;
  backend::QuantizedWeight q;
  q.out_features = out;
  q.in_features = in;
  q.group_size = group_size;
  q.qweight = Tensor::empty({out, in / 8}, DType::kI32);
  q.scales = Tensor::empty({out, groups}, DType::kF16);
  q.zeros = Tensor::empty({out, groups}, DType::kU8);
  const float* w = weight.data<float>();
  auto* packed = q.qweight.data<int32_t>();
  auto* scales = static_cast<uint16_t*>(q.scales.raw_data());
  auto* zeros = q.zeros.data<uint8_t>();
  std::fill_n(packed, q.qweight.numel(), 0);
  // Rows are independent (each writes its own packed words): one per thread.
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* values = w + o * in + g * group_size;
      const auto [lo, hi] = std::minmax_element(values, values + group_size);
      const uint16_t scale_bits = f32_to_f16(std::max(*hi - *lo, 1e-5f) / 15.0f);
      const float scale = f16_to_f32(scale_bits);
      const float zero = std::clamp(std::nearbyint(-*lo / scale), 0.0f, 15.0f);
      scales[o * groups + g] = scale_bits;
      zeros[o * groups + g] = static_cast<uint8_t>(zero);
      for (int64_t i = 0; i < group_size; ++i) {
        const auto v = static_cast<uint32_t>(std::clamp(std::nearbyint(values[i] / scale) + zero, 0.0f, 15.0f));
        const int64_t input = g * group_size + i;
        packed[o * (in / 8) + input / 8] |= static_cast<int32_t>(v << (4 * (input % 8)));
      }
    }
  }
  return q;
}

namespace {

// What the 16-bit model's run over the calibration gave: every layer's
// scales, and its inputs for the clipping search.
struct Calibrated {
  std::vector<LayerScales> scales;
  std::vector<LayerInputs> inputs;
};

Calibrated calibrate(const std::filesystem::path& model_dir, const ModelSpec& spec, const Architecture& arch,
                     const Checkpoint& checkpoint, int64_t group_size, const AwqCalibration& calibration) {
  // The norms straight from their checkpoint tensors (the linear layers'
  // inputs are formed from them on the host); the layers are assembled one at
  // a time below, for the searches, once the model has run.
  LayerNorms norms;
  norms.eps = static_cast<float>(spec.rms_norm_eps);
  norms.attn.resize(spec.num_layers);
  norms.ffn.resize(spec.num_layers);
  for (const auto& [name, t] : layer_tensors(spec, arch)) {
    if (t.canonical == "attn_norm") norms.attn[t.layer] = checkpoint.get(name).tensor.to_f32();
    if (t.canonical == "ffn_norm") norms.ffn[t.layer] = checkpoint.get(name).tensor.to_f32();
  }
  for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
    for (const Tensor* norm : {&norms.attn[layer], &norms.ffn[layer]}) {
      if (!norm->defined() || norm->rank() != 1 || norm->dim(0) != spec.hidden_size) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("{}: layer {}'s norm weights are missing or not [{}]", model_dir.string(), layer,
                                spec.hidden_size));
      }
    }
  }
  std::unique_ptr<backend::Backend> own_cpu = backend::make_cpu_backend();
  backend::Backend& runner = calibration.backend != nullptr ? *calibration.backend : *own_cpu;
  int64_t tokens = 0;
  for (const auto& seq : calibration.sequences) tokens += static_cast<int64_t>(seq.size());
  log_info("auto_awq: running the 16-bit model over {} calibration tokens ({} sequences) on {}", tokens,
           calibration.sequences.size(), runner.device().to_string());
  std::vector<LayerInputs> inputs;
  {
    std::unique_ptr<Transformer> model = load_transformer(model_dir, runner);
    inputs = collect_linear_inputs(*model, norms, calibration.sequences, calibration.batch_size);
  }
  std::vector<LayerScales> scales(spec.num_layers);
  for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
    const CanonicalWeights part = assemble_part(spec, arch, checkpoint, layer);
    const std::string base = "layers." + std::to_string(layer) + ".";
    auto choose = [&](const char* name, const LinearInputs& in) {
      return choose_input_scale(part.at(base + name).to_f32(), in, group_size, calibration.search_scale,
                                calibration.ratio, *own_cpu);
    };
    LayerScales& s = scales[layer];
    s.qkv = choose("qkv", inputs[layer].qkv);
    s.o = choose("o", tied_to_kv_heads(inputs[layer].o, spec.num_heads, spec.num_kv_heads, spec.head_dim));
    s.gate_up = choose("gate_up", inputs[layer].gate_up);
    s.down = choose("down", inputs[layer].down);
    if (calibration.search_scale) {
      auto gain = [](const InputScale& in) { return in.rtn_error > 0 ? 1.0 - in.error / in.rtn_error : 0.0; };
      log_info("auto_awq: layer {}: alpha qkv {:.2f} o {:.2f} gate_up {:.2f} down {:.2f}; output error {:.1f} %, "
               "{:.1f} %, {:.1f} %, {:.1f} % below round-to-nearest",
               layer, s.qkv.alpha, s.o.alpha, s.gate_up.alpha, s.down.alpha, 100 * gain(s.qkv), 100 * gain(s.o),
               100 * gain(s.gate_up), 100 * gain(s.down));
    }
  }
  return {std::move(scales), std::move(inputs)};
}

// The inputs and scale a linear checkpoint tensor is clipped against, or
// null for those not clipped (qkv, and everything without --search-scale).
const LinearInputs* clip_inputs(const LayerTensor& t, const Calibrated& c, const std::vector<float>** s) {
  const LayerInputs& in = c.inputs[t.layer];
  const LayerScales& scales = c.scales[t.layer];
  if (t.canonical == "o") return *s = &scales.o.s, &in.o;
  if (t.canonical == "gate_up") return *s = &scales.gate_up.s, &in.gate_up;
  if (t.canonical == "down") return *s = &scales.down.s, &in.down;
  return nullptr;
}

bool is_weight_file(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  return path.extension() == ".safetensors" || path.extension() == ".bin" || path.extension() == ".pt" ||
         path.extension() == ".pth" || name.ends_with(".index.json") || name == "config.json";
}

}  // namespace

void write_awq_model(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                     int64_t group_size) {
  write_awq_model(model_dir, out_dir, group_size, AwqCalibration{});
}

void write_awq_model(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                     int64_t group_size, const AwqCalibration& calibration) {
  const ModelSpec spec = read_model_spec(model_dir);
  // The linears are read from the checkpoint as they are stored: 16-bit ones only.
  if (spec.quantization.four_bit() || spec.quantization.fp8()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} is already a quantized ({}) checkpoint", model_dir.string(), spec.quantization.method),
                "quantize the 16-bit model it came from");
  }
  const Architecture& arch = find_architecture(spec.architecture);
  const Checkpoint checkpoint = Checkpoint::open(model_dir);
  const std::set<std::string> linears = linear_names(spec, arch);
  for (const std::string& name : linears) {  // before any calibration: the sizes the groups must divide
    const Tensor& source = checkpoint.get(name).tensor;
    if (source.dim(1) % group_size != 0 || source.dim(0) % 8 != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: [{}, {}] cannot be quantized in groups of {} (AWQ needs the inputs to be a multiple "
                              "of the group size and the outputs of 8)",
                              name, source.dim(0), source.dim(1), group_size),
                  "choose --w-group-size 32, 64 or 128 dividing every layer's input size");
    }
  }
  const std::map<std::string, LayerTensor> per_layer = layer_tensors(spec, arch);
  const bool scaled = !calibration.sequences.empty();
  const Calibrated calibrated =
      scaled ? calibrate(model_dir, spec, arch, checkpoint, group_size, calibration) : Calibrated{};
  const std::vector<LayerScales>& scales = calibrated.scales;
  std::unique_ptr<backend::Backend> cpu = calibration.search_scale ? backend::make_cpu_backend() : nullptr;
  std::map<std::string, double> clip_gains;  // canonical name ("o", ...) -> summed gain, for the log
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : checkpoint.names()) {
    const Tensor& checkpoint_tensor = checkpoint.get(name).tensor;
    const auto found = per_layer.find(name);
    const bool folds = scaled && found != per_layer.end() && takes_scales(found->second, name);
    const Tensor source =
        folds ? fold_scales(checkpoint_tensor, found->second, scales[found->second.layer], spec) : checkpoint_tensor;
    if (!linears.contains(name)) {
      // As it is (a view of the mapped file), or scaled in its own dtype.
      tensors.emplace_back(name, folds ? source.to_dtype(checkpoint_tensor.dtype()) : source);
      continue;
    }
    Tensor rounded = source.to_dtype(DType::kF32);
    const std::vector<float>* s = nullptr;
    const LinearInputs* inputs =
        calibration.search_scale && found != per_layer.end() ? clip_inputs(found->second, calibrated, &s) : nullptr;
    if (inputs != nullptr) {
      double gain = 0.0;
      rounded = clip_for_rounding(rounded, *inputs, *s, group_size, *cpu, &gain);
      clip_gains[found->second.canonical] += gain / spec.num_layers;
    }
    const AwqTensors awq = to_awq_tensors(quantize_rtn(rounded, group_size));
    const std::string base = name.substr(0, name.size() - 7);
    tensors.emplace_back(base + ".qweight", awq.qweight);
    tensors.emplace_back(base + ".qzeros", awq.qzeros);
    tensors.emplace_back(base + ".scales", awq.scales);
  }
  std::filesystem::create_directories(out_dir);
  write_safetensors(out_dir / "model.safetensors", tensors);

  std::ifstream config_in(model_dir / "config.json");
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(config_in);
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4},           {"group_size", group_size},
                                   {"zero_point", true},    {"version", "gemm"}};
  std::ofstream(out_dir / "config.json") << config.dump(2) << "\n";
  for (const auto& entry : std::filesystem::directory_iterator(model_dir)) {
    if (!entry.is_regular_file() || is_weight_file(entry.path())) continue;
    std::filesystem::copy_file(entry.path(), out_dir / entry.path().filename(),
                               std::filesystem::copy_options::overwrite_existing);
  }
  if (!clip_gains.empty()) {
    std::string gains;
    for (const auto& [name, gain] : clip_gains) gains += fmt::format(" {} {:.1f} %,", name, 100 * gain);
    gains.pop_back();
    log_info("auto_awq: clipping put the outputs nearer the 16-bit ones than rounding alone, mean over layers "
             "(squared error):{}",
             gains);
  }
  log_info("wrote {} linear layers in 4 bits ({}, groups of {}) to {}", linears.size(),
           !scaled                   ? "round-to-nearest, no calibration"
           : calibration.search_scale ? "activation-aware scales, alpha and clipping searched"
                                      : fmt::format("activation-aware scales, alpha {:.2f}", calibration.ratio),
           group_size, out_dir.string());
}

}  // namespace tessera::model
