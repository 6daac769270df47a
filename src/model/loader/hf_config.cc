#include "model/loader/hf_config.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <string_view>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera::model {

using nlohmann::json;

namespace {

// Reads and parses one JSON file, naming it in every error.
json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot open {}", path.string()),
                "is this a Hugging Face model directory?");
  }
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} is not valid JSON: {}", path.string(), e.what()));
  }
}

class ConfigReader {
 public:
  ConfigReader(const json& config, const std::string& source) : config_(config), source_(source) {}

  bool has(const char* key) const { return config_.contains(key) && !config_[key].is_null(); }

  int64_t integer(const char* key) const {
    if (!has(key)) fail(key, "is missing");
    const json& value = config_[key];
    if (!value.is_number_integer()) fail(key, "must be an integer");
    return value.get<int64_t>();
  }
  int64_t integer_or(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  int64_t positive_int(const char* key) const {
    const int64_t v = integer(key);
    if (v <= 0) fail(key, fmt::format("must be positive, got {}", v));
    return v;
  }
  int64_t positive_int_or(const char* key, int64_t fallback) const { return has(key) ? positive_int(key) : fallback; }

  double positive_number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& value = config_[key];
    if (!value.is_number()) fail(key, "must be a number");
    double v = value.get<double>();
    if (!(v > 0) || !std::isfinite(v)) fail(key, fmt::format("must be a positive number, got {}", v));
    return v;
  }

  bool bool_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!config_[key].is_boolean()) fail(key, "must be true or false");
    return config_[key].get<bool>();
  }

  // bos/eos ids come as an integer, a list of integers, or null.
  std::vector<int32_t> id_list(const char* key) const {
    std::vector<int32_t> ids;
    if (!has(key)) return ids;
    const json& value = config_[key];
    auto push = [&](const json& item) {
      if (!item.is_number_integer() || item.get<int64_t>() < 0) fail(key, "must hold non-negative integers");
      ids.push_back(item.get<int32_t>());
    };
    if (value.is_array()) {
      for (const json& item : value) push(item);
    } else {
      push(value);
    }
    return ids;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: '{}' {}", source_, key, what));
  }

  const json& raw() const { return config_; }

 private:
  const json& config_;
  const std::string& source_;
};

DType parse_torch_dtype(const ConfigReader& reader) {
  const char* key = reader.has("torch_dtype") ? "torch_dtype" : "dtype";  // transformers 5 writes "dtype"
  if (!reader.has(key)) return DType::kBF16;
  const json& value = reader.raw()[key];
  if (!value.is_string()) reader.fail(key, "must be a string");
  std::string name = value.get<std::string>();
  if (name == "float32") return DType::kF32;
  if (name == "float16") return DType::kF16;
  if (name == "bfloat16") return DType::kBF16;
  reader.fail(key, fmt::format("is '{}'; supported: float32, float16, bfloat16", name));
}

// rope_scaling: null, or {"type"|"rope_type": linear|dynamic|llama3|yarn|default, ...}.
// transformers 5 may write the same under "rope_parameters" (with rope_theta inside).
RopeScaling parse_rope_scaling(const json& scaling, const std::string& source, int64_t max_positions) {
  RopeScaling rope;
  if (scaling.is_null()) return rope;
  if (!scaling.is_object()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: 'rope_scaling' must be an object or null", source));
  }
  ConfigReader reader(scaling, source);
  std::string type;
  if (reader.has("rope_type")) type = scaling["rope_type"].get<std::string>();
  else if (reader.has("type")) type = scaling["type"].get<std::string>();
  else type = "default";
  if (type == "default") return rope;

  if (type == "linear") rope.type = RopeScalingType::kLinear;
  else if (type == "dynamic") rope.type = RopeScalingType::kDynamic;
  else if (type == "llama3") rope.type = RopeScalingType::kLlama3;
  else if (type == "yarn") rope.type = RopeScalingType::kYarn;
  else {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: rope scaling type '{}' is not supported", source, type),
                "supported: linear, dynamic, llama3, yarn");
  }
  rope.factor = reader.positive_number_or("factor", 1.0);
  rope.low_freq_factor = reader.positive_number_or("low_freq_factor", 1.0);
  rope.high_freq_factor = reader.positive_number_or("high_freq_factor", 4.0);
  rope.original_max_position_embeddings = reader.positive_int_or("original_max_position_embeddings", max_positions);
  rope.beta_fast = reader.positive_number_or("beta_fast", 32.0);
  rope.beta_slow = reader.positive_number_or("beta_slow", 1.0);
  if (reader.has("attention_factor")) rope.attention_factor = reader.positive_number_or("attention_factor", 1.0);
  if (rope.type == RopeScalingType::kLlama3 && rope.high_freq_factor <= rope.low_freq_factor) {
    reader.fail("high_freq_factor", "must be larger than low_freq_factor");
  }
  return rope;
}

// quant_method "fp8" (the *-FP8 models, Hugging Face's fine-grained FP8):
// E4M3 weights ("fmt", the default), a scale per block of weight_block_size
// [rows, cols] (absent: [128, 128]). Activations stay 16-bit whatever
// activation_scheme says (a static scheme's input scales go unread).
template <typename Text>
QuantizationConfig parse_fp8(const json& q, const ConfigReader& reader, const Text& text, const std::string& source) {
  QuantizationConfig out;
  out.method = "fp8";
  out.bits = 8;
  const std::string format = text("fmt", "e4m3");
  if (format != "e4m3") {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: FP8 fmt '{}' is not supported", source, format),
                "tessera reads E4M3 weights (fmt \"e4m3\", what the published *-FP8 models store)");
  }
  out.block_rows = out.block_cols = 128;
  if (reader.has("weight_block_size")) {
    const json& block = q["weight_block_size"];
    const bool ok = block.is_array() && block.size() == 2 && block[0].is_number_integer() &&
                    block[1].is_number_integer() && block[0].get<int64_t>() > 0 && block[1].get<int64_t>() > 0;
    if (!ok) reader.fail("quantization_config.weight_block_size", "must be two positive integers [rows, cols]");
    out.block_rows = block[0].get<int64_t>();
    out.block_cols = block[1].get<int64_t>();
  }
  return out;
}

// quantization_config: 4-bit linears in groups of 32, 64 or 128 (the small
// ones for small models) with zero points, as AWQ's GEMM layout or GPTQ's;
// or FP8 linears with block scales.
QuantizationConfig parse_quantization(const json& q, const std::string& source) {
  QuantizationConfig out;
  if (q.is_null()) return out;
  if (!q.is_object()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: 'quantization_config' must be an object", source));
  }
  ConfigReader reader(q, source);
  auto text = [&](const char* key, const char* fallback) -> std::string {
    if (!reader.has(key)) return fallback;
    if (!q[key].is_string()) reader.fail(fmt::format("quantization_config.{}", key), "must be a string");
    std::string value = q[key].get<std::string>();
    for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return value;
  };
  out.method = text("quant_method", "");
  if (out.fp8()) return parse_fp8(q, reader, text, source);
  if (!out.four_bit()) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: quantization_config.quant_method '{}' is not supported", source, out.method),
                "tessera serves 4-bit AWQ checkpoints (quant_method \"awq\", as LMDeploy's `lite auto_awq` and "
                "AutoAWQ write them), 4-bit GPTQ ones (quant_method \"gptq\"), FP8 ones (quant_method \"fp8\", "
                "the *-FP8 models) and 16-bit ones");
  }
  const std::string name = out.awq() ? "AWQ" : "GPTQ";
  const char* bits_key = reader.has("bits") ? "bits" : "w_bit";  // AutoAWQ's older name
  out.bits = reader.integer_or(bits_key, 4);
  const char* group_key = reader.has("group_size") ? "group_size" : "q_group_size";
  out.group_size = reader.integer_or(group_key, 128);  // GPTQ writes -1 for one group per channel
  if (out.bits != 4) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: {} with {} bits is not supported", source, name, out.bits),
                fmt::format("tessera's {} kernels read 4-bit weights (bits: 4)", name));
  }
  if (out.group_size != 32 && out.group_size != 64 && out.group_size != 128) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: {} group_size {} is not supported", source, name, out.group_size),
                out.group_size == -1 ? "a group_size of -1 (one group per output channel) is not supported; "
                                       "supported group sizes: 32, 64, 128"
                                     : "supported group sizes: 32, 64, 128");
  }
  if (out.gptq()) {
    if (reader.bool_or("lm_head", false)) {  // its LM head would be read as absent, and tied to the embeddings
      throw Error(ErrorKind::kUnsupported, fmt::format("{}: GPTQ with a 4-bit LM head (lm_head true) is not supported",
                                                       source),
                  "quantize with lm_head false (the default): tessera keeps the LM head 16-bit");
    }
    out.desc_act = reader.bool_or("desc_act", false);
    out.checkpoint_format = text("checkpoint_format", "gptq");
    if (out.checkpoint_format != "gptq" && out.checkpoint_format != "gptq_v2") {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: GPTQ checkpoint_format '{}' is not supported", source, out.checkpoint_format),
                  "tessera reads GPTQ's own layout (checkpoint_format \"gptq\" or \"gptq_v2\"); export without "
                  "converting to another kernel's layout");
    }
    return out;
  }
  out.zero_point = reader.bool_or("zero_point", true);
  out.version = text("version", "gemm");
  if (!out.zero_point) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: AWQ without zero points is not supported", source),
                "quantize with zero_point true (the default of AutoAWQ and LMDeploy)");
  }
  if (out.version != "gemm") {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: AWQ version '{}' is not supported", source, out.version),
                "tessera reads AWQ's GEMM layout (version \"gemm\"); re-export with version gemm");
  }
  return out;
}

}  // namespace

ModelSpec parse_model_spec(const json& config, const std::string& source) {
  if (!config.is_object()) throw Error(ErrorKind::kInvalidArgument, source + ": the config must be a JSON object");
  ConfigReader reader(config, source);
  ModelSpec spec;
  if (reader.has("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string()) {
    spec.architecture = config["architectures"][0].get<std::string>();
  } else {
    reader.fail("architectures", "must be a non-empty list of names, e.g. [\"LlamaForCausalLM\"]");
  }
  if (reader.has("model_type") && config["model_type"].is_string()) spec.model_type = config["model_type"];

  spec.hidden_size = reader.positive_int("hidden_size");
  spec.num_layers = reader.positive_int("num_hidden_layers");
  spec.num_heads = reader.positive_int("num_attention_heads");
  spec.num_kv_heads = reader.positive_int_or("num_key_value_heads", spec.num_heads);
  if (spec.num_heads % spec.num_kv_heads != 0) {
    reader.fail("num_key_value_heads", fmt::format("({}) must divide num_attention_heads ({})", spec.num_kv_heads,
                                                   spec.num_heads));
  }
  if (!reader.has("head_dim") && spec.hidden_size % spec.num_heads != 0) {
    reader.fail("hidden_size", "must be divisible by num_attention_heads when head_dim is not given");
  }
  spec.head_dim = reader.positive_int_or("head_dim", spec.hidden_size / spec.num_heads);
  if (spec.head_dim % 2 != 0) reader.fail("head_dim", "must be even for rotary embeddings");
  spec.intermediate_size = reader.positive_int("intermediate_size");
  spec.vocab_size = reader.positive_int("vocab_size");
  spec.max_position_embeddings = reader.positive_int_or("max_position_embeddings", 2048);
  spec.rms_norm_eps = reader.positive_number_or("rms_norm_eps", 1e-6);

  const json* rope_parameters = nullptr;
  if (reader.has("rope_parameters") && config["rope_parameters"].is_object()) rope_parameters = &config["rope_parameters"];
  spec.rope_theta = reader.positive_number_or("rope_theta", 10000.0);
  if (rope_parameters && !reader.has("rope_theta")) {
    spec.rope_theta = ConfigReader(*rope_parameters, source).positive_number_or("rope_theta", 10000.0);
  }
  if (reader.has("rope_scaling")) {
    spec.rope_scaling = parse_rope_scaling(config["rope_scaling"], source, spec.max_position_embeddings);
  } else if (rope_parameters) {
    spec.rope_scaling = parse_rope_scaling(*rope_parameters, source, spec.max_position_embeddings);
  }

  // Qwen2 and Qwen3 declare a window but only use it with use_sliding_window = true.
  bool window_enabled =
      reader.bool_or("use_sliding_window", spec.model_type != "qwen2" && spec.model_type != "qwen3");
  if (window_enabled && reader.has("sliding_window")) spec.sliding_window = reader.positive_int("sliding_window");

  // Flags that give linear layers biases tessera's architectures do not load
  // (Qwen2's q/k/v biases are the architecture's own, declared by no flag):
  // Llama's attention_bias and mlp_bias, InternLM2's bias, InternLM3's bias
  // and qkv_bias. Loading such a checkpoint without them would be wrong.
  for (const char* flag : {"attention_bias", "mlp_bias", "bias", "qkv_bias"}) {
    if (!reader.bool_or(flag, false)) continue;
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: {} is true: biases on the {} linear layers of {} are not supported", source, flag,
                            std::string_view(flag) == "mlp_bias" ? "MLP's" : "attention's", spec.architecture),
                "tessera loads biases only where the architecture always has them (Qwen2's q, k and v)");
  }

  // Rotation of only part of each head (Phi-4-mini, StableLM): tessera's RoPE
  // rotates all of head_dim.
  // (transformers 5 writes it into rope_parameters, older configs beside it).
  double rotary = reader.positive_number_or("partial_rotary_factor", 1.0);
  if (rope_parameters) {
    rotary *= ConfigReader(*rope_parameters, source).positive_number_or("partial_rotary_factor", 1.0);
  }
  if (rotary != 1.0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: partial_rotary_factor {} (RoPE on part of each head) is not supported", source,
                            rotary),
                "tessera rotates the whole head (partial_rotary_factor 1)");
  }

  spec.tie_word_embeddings = reader.bool_or("tie_word_embeddings", false);
  spec.bos_token_ids = reader.id_list("bos_token_id");
  spec.eos_token_ids = reader.id_list("eos_token_id");
  spec.torch_dtype = parse_torch_dtype(reader);
  if (reader.has("quantization_config")) spec.quantization = parse_quantization(config["quantization_config"], source);
  return spec;
}

// --hf-overrides as a JSON object, or an error saying what to give.
static json parse_config_patch(const std::string& text) {
  const std::string hint = "give a JSON object of config.json's keys, e.g. --hf-overrides '{\"max_position_embeddings\": 8192}'";
  json patch;
  try {
    patch = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--hf-overrides is not JSON: {}", e.what()), hint);
  }
  if (!patch.is_object()) throw Error(ErrorKind::kInvalidArgument, "--hf-overrides must be a JSON object", hint);
  return patch;
}

void apply_overrides(ModelSpec& spec, const SpecOverrides& overrides) {
  if (overrides.rope_scaling_factor > 0.0) {
    // As LMDeploy's TurboMind does: the config's scaling, whatever its type,
    // gives way to dynamic NTK over the trained context.
    spec.rope_scaling = RopeScaling{};
    spec.rope_scaling.type = RopeScalingType::kDynamic;
    spec.rope_scaling.factor = overrides.rope_scaling_factor;
  }
}

ModelSpec read_model_spec(const std::filesystem::path& dir, const SpecOverrides& overrides) {
  std::filesystem::path config_path = dir / "config.json";
  json config = read_json_file(config_path);
  std::string source = config_path.string();
  if (!overrides.config_patch.empty()) {
    config.merge_patch(parse_config_patch(overrides.config_patch));
    source += " with --hf-overrides";
  }
  ModelSpec spec = parse_model_spec(config, source);

  // generation_config.json often lists extra stop ids (e.g. Llama 3's <|eot_id|>).
  std::filesystem::path generation_path = dir / "generation_config.json";
  if (std::filesystem::exists(generation_path)) {
    json generation = read_json_file(generation_path);
    if (generation.is_object()) {
      for (int32_t id : ConfigReader(generation, generation_path.string()).id_list("eos_token_id")) {
        if (std::find(spec.eos_token_ids.begin(), spec.eos_token_ids.end(), id) == spec.eos_token_ids.end()) {
          spec.eos_token_ids.push_back(id);
        }
      }
    }
  }
  apply_overrides(spec, overrides);
  return spec;
}

}  // namespace tessera::model
