// ModelSpec: the typed form of a model directory's config.json.
//
// Everything the layers, the weight map and the memory plan need to know about
// a model's shape lives here, validated once at load time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tessera::model {

enum class RopeScalingType { kNone, kLinear, kDynamic, kLlama3, kYarn };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn: the context the model was trained on before scaling
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // yarn's mscale; derived from factor when absent
};

// config.json "quantization_config": 4-bit weights of the linear layers in
// groups with a scale and a zero point each, from an AWQ export (AutoAWQ,
// LMDeploy's `lite auto_awq`) or a GPTQ one (AutoGPTQ, GPTQModel, Hugging
// Face's optimum); the embeddings, LM head, norms and biases stay 16-bit. Both
// formats load into the same canonical 4-bit weights
// (backend/quantized_weight.h), so every kernel serves both.
struct QuantizationConfig {
  std::string method;      // "" (16-bit weights), "awq", "gptq" or "fp8"
  int64_t bits = 0;        // 4
  int64_t group_size = 0;  // 32, 64 or 128
  bool zero_point = true;  // awq
  std::string version;     // awq: "gemm"
  // gptq: how the checkpoint stores zero points. "gptq" (AutoGPTQ's, the
  // default) stores each zero minus one; "gptq_v2" (GPTQModel's) stores it.
  std::string checkpoint_format;
  bool desc_act = false;   // gptq: act-order, where g_idx may put inputs out of group order
  // fp8: each linear's E4M3 weight [out, in] has one f32 scale per block of
  // [block_rows, block_cols] (weight_block_size), `<name>.weight_scale_inv`.
  int64_t block_rows = 0, block_cols = 0;

  // What `lite auto_awq` writes: AWQ's GEMM layout, 4 bits, zero points.
  static QuantizationConfig awq_gemm(int64_t group_size) {
    QuantizationConfig config;
    config.method = "awq";
    config.bits = 4;
    config.group_size = group_size;
    config.version = "gemm";
    return config;
  }

  bool awq() const { return method == "awq"; }
  bool gptq() const { return method == "gptq"; }
  // FP8 (E4M3) linears with block scales, the format of the published *-FP8
  // models. No kernel multiplies FP8 weights yet: they are dequantized to
  // 16-bit rows at load, like act-order GPTQ's.
  bool fp8() const { return method == "fp8"; }
  // The checkpoint's linears are 4-bit groups (either format).
  bool four_bit() const { return awq() || gptq(); }
  // They stay 4-bit once loaded. Act-order GPTQ (desc_act) assigns inputs to
  // groups out of order, which the 4-bit kernels' contiguous groups cannot
  // express: its linears are dequantized to 16-bit at load instead.
  bool kept_four_bit() const { return four_bit() && !(gptq() && desc_act); }
  // Bytes of `params` weights packed on a GPU: `bits` each, and 4 bytes a
  // group of scale and zero point (one word in the tiles, two 16-bit values
  // in the Hopper GEMM's copy).
  int64_t packed_bytes(int64_t params) const { return params * bits / 8 + params / group_size * 4; }
};

// Changes to what config.json says, asked for on the command line.
struct SpecOverrides {
  // > 0: LMDeploy's --rope-scaling-factor. RoPE becomes dynamic NTK with this
  // factor over max_position_embeddings, in place of the config's scaling.
  double rope_scaling_factor = 0.0;
  // LMDeploy's --hf-overrides: a JSON object merged into config.json before
  // it is read (RFC 7386: nested objects key by key, null removes a key).
  std::string config_patch;
};

struct ModelSpec {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama"
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  std::optional<int64_t> sliding_window;  // Mistral/Qwen2: keys older than this are not attended
  bool qkv_bias = false;    // from the architecture (apply_architecture)
  bool head_norms = false;  // from the architecture: Qwen3's q_norm and k_norm a layer, head_dim each
  bool tie_word_embeddings = false;
  std::vector<int32_t> bos_token_ids;
  std::vector<int32_t> eos_token_ids;
  DType torch_dtype = DType::kBF16;  // the checkpoint's declared dtype
  QuantizationConfig quantization;    // method "" unless config.json declares one

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  int64_t qkv_size() const { return q_size() + 2 * kv_size(); }
  // Weights of one layer's linears: qkv, o, gate | up and down.
  int64_t linear_params_per_layer() const {
    return (qkv_size() + q_size() + 3 * intermediate_size) * hidden_size;
  }
};

}  // namespace tessera::model
