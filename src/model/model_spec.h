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

// config.json "quantization_config" (AutoAWQ / LMDeploy exports): 4-bit
// weights of the linear layers, the embeddings, LM head, norms and biases 16-bit.
struct QuantizationConfig {
  std::string method;      // "" (16-bit weights) or "awq"
  int64_t bits = 0;        // 4
  int64_t group_size = 0;  // 32, 64 or 128
  bool zero_point = true;
  std::string version;     // "gemm"

  bool awq() const { return method == "awq"; }
  // Bytes of `params` weights packed on a GPU: `bits` each, and 4 bytes a
  // group of scale and zero point (one word in the tiles, two 16-bit values
  // in the Hopper GEMM's copy).
  int64_t packed_bytes(int64_t params) const { return params * bits / 8 + params / group_size * 4; }
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
  bool qkv_bias = false;
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
