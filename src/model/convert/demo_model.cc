#include "model/convert/demo_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/convert/safetensors_writer.h"

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

void write_random_llama(const std::filesystem::path& out_dir, const RandomLlamaShape& shape, uint64_t seed) {
  const int64_t kHidden = shape.hidden, kLayers = shape.layers, kHeads = shape.heads, kKvHeads = shape.kv_heads;
  const int64_t kIntermediate = shape.intermediate, kContext = shape.context, vocab_size = shape.vocab;
  if (kHidden % kHeads != 0 || kHeads % kKvHeads != 0 || (kHidden / kHeads) % 2 != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("random model: hidden {} / heads {} / kv heads {} do not form whole even heads", kHidden,
                            kHeads, kKvHeads));
  }
  const int64_t head_dim = kHidden / kHeads;
  DemoRandom random(seed);
  // Uniform(-a, a) has std a/sqrt(3); scale by fan-in so activations stay O(1).
  const float linear_scale = std::sqrt(3.0f / kHidden);
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.push_back({"model.embed_tokens.weight", random_tensor(random, {vocab_size, kHidden}, 1.0f)});
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    tensors.push_back({p + "input_layernorm.weight", random_tensor(random, {kHidden}, 0.1f, 1.0f)});
    tensors.push_back({p + "self_attn.q_proj.weight", random_tensor(random, {kHeads * head_dim, kHidden}, linear_scale)});
    tensors.push_back({p + "self_attn.k_proj.weight", random_tensor(random, {kKvHeads * head_dim, kHidden}, linear_scale)});
    tensors.push_back({p + "self_attn.v_proj.weight", random_tensor(random, {kKvHeads * head_dim, kHidden}, linear_scale)});
    tensors.push_back({p + "self_attn.o_proj.weight", random_tensor(random, {kHidden, kHeads * head_dim}, linear_scale)});
    tensors.push_back({p + "post_attention_layernorm.weight", random_tensor(random, {kHidden}, 0.1f, 1.0f)});
    tensors.push_back({p + "mlp.gate_proj.weight", random_tensor(random, {kIntermediate, kHidden}, linear_scale)});
    tensors.push_back({p + "mlp.up_proj.weight", random_tensor(random, {kIntermediate, kHidden}, linear_scale)});
    tensors.push_back({p + "mlp.down_proj.weight",
                       random_tensor(random, {kHidden, kIntermediate}, std::sqrt(3.0f / kIntermediate))});
  }
  tensors.push_back({"model.norm.weight", random_tensor(random, {kHidden}, 0.1f, 1.0f)});
  tensors.push_back({"lm_head.weight", random_tensor(random, {vocab_size, kHidden}, linear_scale * 4.0f)});
  if (shape.silence_first_ids > 0) {
    // Zero LM-head rows give those ids logit 0, below about half of the rest,
    // so greedy text avoids them (the demo's special and raw byte pieces).
    Tensor& head = tensors.back().second;
    std::fill_n(head.data<float>(), std::min(shape.silence_first_ids, vocab_size) * kHidden, 0.0f);
  }

  std::filesystem::create_directories(out_dir);
  write_safetensors(out_dir / "model.safetensors", tensors);
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
      {"rope_theta", 10000.0},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", false},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", "float32"},
  };
  std::ofstream(out_dir / "config.json") << config.dump(2) << "\n";
  std::ofstream(out_dir / "generation_config.json") << nlohmann::json{{"bos_token_id", 1}, {"eos_token_id", 2}}.dump(2)
                                                    << "\n";
  if (!std::filesystem::exists(out_dir / "config.json")) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot write into {}", out_dir.string()));
  }
}

}  // namespace tessera::model
