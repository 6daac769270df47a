#include "model/convert/awq_quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "model/arch/architecture.h"
#include "model/convert/safetensors_writer.h"
#include "model/loader/awq.h"
#include "model/loader/checkpoint.h"
#include "model/loader/hf_config.h"

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

// Checkpoint names of the linear layers (".weight" of qkv, o, gate_up, down sources).
std::set<std::string> linear_names(const ModelSpec& spec, const Architecture& arch) {
  std::set<std::string> names;
  for (const WeightSource& source : arch.sources) {
    const std::string& c = source.canonical_pattern;
    const bool linear = c.ends_with(".qkv") || c.ends_with(".o") || c.ends_with(".gate_up") || c.ends_with(".down");
    if (!linear || !source.checkpoint_pattern.ends_with(".weight")) continue;
    for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
      std::string name = source.checkpoint_pattern;
      name.replace(name.find("{L}"), 3, std::to_string(layer));
      names.insert(name);
    }
  }
  return names;
}

bool is_weight_file(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  return path.extension() == ".safetensors" || path.extension() == ".bin" || path.extension() == ".pt" ||
         path.extension() == ".pth" || name.ends_with(".index.json") || name == "config.json";
}

}  // namespace

void write_awq_model(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                     int64_t group_size) {
  const ModelSpec spec = read_model_spec(model_dir);
  if (spec.quantization.awq()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} is already an AWQ checkpoint", model_dir.string()),
                "quantize the 16-bit model it came from");
  }
  const Architecture& arch = find_architecture(spec.architecture);
  const Checkpoint checkpoint = Checkpoint::open(model_dir);
  const std::set<std::string> linears = linear_names(spec, arch);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : checkpoint.names()) {
    const Tensor& source = checkpoint.get(name).tensor;
    if (!linears.contains(name)) {
      tensors.emplace_back(name, source);  // a view of the mapped file, written as it is
      continue;
    }
    const int64_t out = source.dim(0), in = source.dim(1);
    if (in % group_size != 0 || out % 8 != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: [{}, {}] cannot be quantized in groups of {} (AWQ needs the inputs to be a multiple "
                              "of the group size and the outputs of 8)",
                              name, out, in, group_size),
                  "choose --w-group-size 32, 64 or 128 dividing every layer's input size");
    }
    const AwqTensors awq = to_awq_tensors(quantize_rtn(source.to_dtype(DType::kF32), group_size));
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
  log_info("wrote {} linear layers in 4 bits (round-to-nearest, groups of {}) to {}", linears.size(), group_size,
           out_dir.string());
}

}  // namespace tessera::model
