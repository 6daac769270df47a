#include "model/convert/demo_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/convert/safetensors_writer.h"
#include "model/random_weights.h"

namespace tessera::model {

namespace {

// splitmix64: fully specified, unlike the standard library's distributions,
// so the demo weights are identical everywhere.
class DemoRandom {
 public:
  explicit DemoRandom(uint64_t seed) : state_(seed) {}
  // Uniform in [-scale, scale).
  float uniform(float scale) {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>((static_cast<double>(z >> 11) / 9007199254740992.0 * 2.0 - 1.0) * scale);
  }

 private:
  uint64_t state_;
};

Tensor random_tensor(DemoRandom& random, Shape shape, float scale, float offset = 0.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = offset + random.uniform(scale);
  return t;
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    default: throw Error(ErrorKind::kInvalidArgument, "random model: weights are float32, float16 or bfloat16");
  }
}

}  // namespace

int64_t RandomLlamaShape::parameter_count() const {
  const int64_t head_dim = hidden / heads;
  const int64_t attention = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden;
  const int64_t mlp = 3 * hidden * intermediate;
  return 2 * vocab * hidden + layers * (attention + mlp + 2 * hidden) + hidden;
}

void write_demo_model(const std::filesystem::path& out_dir, int64_t vocab_size) {
  RandomLlamaShape shape;
  shape.vocab = vocab_size;
  shape.silence_first_ids = 259;  // <unk>, <s>, </s> and the 256 byte pieces
  write_random_llama(out_dir, shape, 20261202);
}

RandomLlamaShape random_llama_shape(const std::string& name) {
  const ModelSpec spec = random_model_spec(name);
  RandomLlamaShape shape;
  shape.hidden = spec.hidden_size;
  shape.layers = spec.num_layers;
  shape.heads = spec.num_heads;
  shape.kv_heads = spec.num_kv_heads;
  shape.intermediate = spec.intermediate_size;
  shape.vocab = spec.vocab_size;
  shape.context = spec.max_position_embeddings;
  shape.rope_theta = spec.rope_theta;
  shape.dtype = DType::kBF16;
  return shape;
}

void write_random_llama(const std::filesystem::path& out_dir, const RandomLlamaShape& shape, uint64_t seed) {
  const int64_t kHidden = shape.hidden, kLayers = shape.layers, kHeads = shape.heads, kKvHeads = shape.kv_heads;
  const int64_t kIntermediate = shape.intermediate, kContext = shape.context, vocab_size = shape.vocab;
  if (kHidden % kHeads != 0 || kHeads % kKvHeads != 0 || (kHidden / kHeads) % 2 != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("random model: hidden {} / heads {} / kv heads {} do not form whole even heads", kHidden,
                            kHeads, kKvHeads));
  }
  const int64_t head_dim = kHidden / kHeads;
  const char* dtype_name = torch_dtype_name(shape.dtype);
  DemoRandom random(seed);
  // Made in f32, stored in the shape's dtype at once (one f32 tensor at a time).
  auto make = [&](Shape shape_of, float scale, float offset = 0.0f) {
    Tensor t = random_tensor(random, std::move(shape_of), scale, offset);
    return shape.dtype == DType::kF32 ? t : t.to_dtype(shape.dtype);
  };
  // Uniform(-a, a) has std a/sqrt(3); scale by fan-in so activations stay O(1).
  const float linear_scale = std::sqrt(3.0f / kHidden);
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.push_back({"model.embed_tokens.weight", make({vocab_size, kHidden}, 1.0f)});
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    tensors.push_back({p + "input_layernorm.weight", make({kHidden}, 0.1f, 1.0f)});
    tensors.push_back({p + "self_attn.q_proj.weight", make({kHeads * head_dim, kHidden}, linear_scale)});
    tensors.push_back({p + "self_attn.k_proj.weight", make({kKvHeads * head_dim, kHidden}, linear_scale)});
    tensors.push_back({p + "self_attn.v_proj.weight", make({kKvHeads * head_dim, kHidden}, linear_scale)});
    tensors.push_back({p + "self_attn.o_proj.weight", make({kHidden, kHeads * head_dim}, linear_scale)});
    tensors.push_back({p + "post_attention_layernorm.weight", make({kHidden}, 0.1f, 1.0f)});
    tensors.push_back({p + "mlp.gate_proj.weight", make({kIntermediate, kHidden}, linear_scale)});
    tensors.push_back({p + "mlp.up_proj.weight", make({kIntermediate, kHidden}, linear_scale)});
    tensors.push_back({p + "mlp.down_proj.weight",
                       make({kHidden, kIntermediate}, std::sqrt(3.0f / kIntermediate))});
  }
  tensors.push_back({"model.norm.weight", make({kHidden}, 0.1f, 1.0f)});
  tensors.push_back({"lm_head.weight", make({vocab_size, kHidden}, linear_scale * 4.0f)});
  if (shape.silence_first_ids > 0) {
    // Zero LM-head rows give those ids logit 0, below about half of the rest,
    // so greedy text avoids them (the demo's special and raw byte pieces).
    Tensor& head = tensors.back().second;  // zero bits are 0 in every float type
    std::memset(head.raw_data(), 0,
                dtype_bytes(head.dtype(), static_cast<size_t>(std::min(shape.silence_first_ids, vocab_size) * kHidden)));
  }

  std::filesystem::create_directories(out_dir);
  write_safetensors(out_dir / "model.safetensors", tensors);
  const nlohmann::json eos = shape.eos_ids.size() == 1 ? nlohmann::json(shape.eos_ids[0]) : nlohmann::json(shape.eos_ids);
  nlohmann::ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", kHidden},
      {"intermediate_size", kIntermediate},
      {"num_hidden_layers", kLayers},
      {"num_attention_heads", kHeads},
      {"num_key_value_heads", kKvHeads},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", kContext},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", shape.rope_theta},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", false},
      {"bos_token_id", 1},
      {"eos_token_id", eos},
      {"torch_dtype", dtype_name},
  };
  if (shape.dynamic_ntk_factor > 0.0) {
    config["rope_scaling"] = {{"type", "dynamic"}, {"factor", shape.dynamic_ntk_factor}};
  }
  std::ofstream(out_dir / "config.json") << config.dump(2) << "\n";
  std::ofstream(out_dir / "generation_config.json") << nlohmann::json{{"bos_token_id", 1},
                                                                      {"eos_token_id", eos}}.dump(2)
                                                    << "\n";
  if (!std::filesystem::exists(out_dir / "config.json")) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot write into {}", out_dir.string()));
  }
}

}  // namespace tessera::model
