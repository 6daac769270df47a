// config.json -> ModelSpec, and the refusals a wrong config or checkpoint gets.
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/error.h"
#include "model/arch/architecture.h"
#include "model/convert/demo_model.h"
#include "model/convert/safetensors_writer.h"
#include "model/loader/checkpoint.h"
#include "model/loader/hf_config.h"
#include "model/transformer.h"

namespace tessera::model {
namespace {

using nlohmann::json;

json llama_config() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
    "vocab_size": 100, "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "bos_token_id": 1, "eos_token_id": [2, 7], "torch_dtype": "bfloat16", "tie_word_embeddings": true})");
}

// Expects `fn` to throw Error of `kind` whose text contains every needle.
template <typename Fn>
void expect_error(Fn fn, ErrorKind kind, std::vector<std::string> needles) {
  try {
    fn();
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ModelSpec, ParsesLlamaConfig) {
  ModelSpec spec = parse_model_spec(llama_config(), "config.json");
  EXPECT_EQ(spec.architecture, "LlamaForCausalLM");
  EXPECT_EQ(spec.head_dim, 16);
  EXPECT_EQ(spec.num_kv_heads, 2);
  EXPECT_EQ(spec.qkv_size(), (4 + 2 * 2) * 16);
  EXPECT_DOUBLE_EQ(spec.rope_theta, 500000.0);
  EXPECT_EQ(spec.eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_TRUE(spec.tie_word_embeddings);
  EXPECT_EQ(spec.torch_dtype, DType::kBF16);
  EXPECT_EQ(spec.rope_scaling.type, RopeScalingType::kNone);
}

TEST(ModelSpec, ParsesRopeScalingAndHeadDim) {
  json c = llama_config();
  c["head_dim"] = 32;
  c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelSpec spec = parse_model_spec(c, "config.json");
  EXPECT_EQ(spec.head_dim, 32);
  EXPECT_EQ(spec.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(spec.rope_scaling.original_max_position_embeddings, 8192);
  c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.5}};
  spec = parse_model_spec(c, "config.json");
  EXPECT_EQ(spec.rope_scaling.type, RopeScalingType::kDynamic);
  EXPECT_DOUBLE_EQ(spec.rope_scaling.factor, 2.5);
}

TEST(ModelSpec, RopeScalingFactorOverrideMakesDynamicNtkInPlaceOfTheConfigs) {
  json c = llama_config();
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
  ModelSpec spec = parse_model_spec(c, "config.json");
  apply_overrides(spec, SpecOverrides{});  // 0: as configured
  EXPECT_EQ(spec.rope_scaling.type, RopeScalingType::kYarn);
  apply_overrides(spec, SpecOverrides{.rope_scaling_factor = 2.5});
  EXPECT_EQ(spec.rope_scaling.type, RopeScalingType::kDynamic);
  EXPECT_DOUBLE_EQ(spec.rope_scaling.factor, 2.5);
  EXPECT_FALSE(spec.rope_scaling.attention_factor.has_value());  // nothing of yarn's is left
  EXPECT_EQ(spec.max_position_embeddings, 128);  // the context it grows past
}

TEST(ModelSpec, RefusesBadValuesNamingTheKey) {
  json c = llama_config();
  c.erase("hidden_size");
  expect_error([&] { parse_model_spec(c, "dir/config.json"); }, ErrorKind::kInvalidArgument,
               {"dir/config.json", "hidden_size", "missing"});
  c = llama_config();
  c["num_key_value_heads"] = 3;
  expect_error([&] { parse_model_spec(c, "config.json"); }, ErrorKind::kInvalidArgument, {"num_key_value_heads"});
  c = llama_config();
  c["vocab_size"] = "many";
  expect_error([&] { parse_model_spec(c, "config.json"); }, ErrorKind::kInvalidArgument, {"vocab_size", "integer"});
  c = llama_config();
  c["rope_scaling"] = {{"type", "su"}};
  expect_error([&] { parse_model_spec(c, "config.json"); }, ErrorKind::kUnsupported, {"su", "llama3"});
  // RoPE on part of each head, beside rope_parameters or inside (transformers 5).
  c = llama_config();
  c["partial_rotary_factor"] = 0.75;
  expect_error([&] { parse_model_spec(c, "config.json"); }, ErrorKind::kUnsupported,
               {"partial_rotary_factor 0.75", "whole head"});
  c = llama_config();
  c["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  expect_error([&] { parse_model_spec(c, "config.json"); }, ErrorKind::kUnsupported, {"partial_rotary_factor 0.5"});
  c["rope_parameters"]["partial_rotary_factor"] = 1.0;
  EXPECT_NO_THROW(parse_model_spec(c, "config.json"));
}

// Biases no architecture loads: a checkpoint declaring them would load
// without them and compute something else. Declared false, they load.
TEST(ModelSpec, RefusesLinearBiasesTheArchitecturesDoNotLoad) {
  for (const char* flag : {"attention_bias", "mlp_bias", "bias", "qkv_bias"}) {
    json c = llama_config();
    c[flag] = false;
    EXPECT_NO_THROW(parse_model_spec(c, "config.json")) << flag;
    c[flag] = true;
    expect_error([&] { parse_model_spec(c, "dir/config.json"); }, ErrorKind::kUnsupported,
                 {"dir/config.json", std::string(flag) + " is true", "LlamaForCausalLM", "not supported"});
  }
}

// What config.json does not say comes from the architecture: the memory
// plan counts Qwen2's q/k/v biases and Qwen3's head norms from it.
TEST(ModelSpec, TheArchitectureStatesItsBiasesAndHeadNorms) {
  for (const auto& [name, bias, norms] : {std::tuple{"LlamaForCausalLM", false, false},
                                          std::tuple{"Qwen2ForCausalLM", true, false},
                                          std::tuple{"Qwen3ForCausalLM", false, true}}) {
    ModelSpec spec;
    apply_architecture(spec, find_architecture(name));
    EXPECT_EQ(spec.qkv_bias, bias) << name;
    EXPECT_EQ(spec.head_norms, norms) << name;
  }
}

class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera-broken-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    write_random_llama(dir_, RandomLlamaShape{32, 1, 2, 1, 48, 50, 64}, 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void edit_config(const std::function<void(json&)>& edit) {
    json c = json::parse(std::ifstream(dir_ / "config.json"));
    edit(c);
    std::ofstream(dir_ / "config.json") << c.dump();
  }
  std::filesystem::path dir_;
};

TEST_F(BrokenCheckpoint, LoadsWhenIntact) {
  auto backend = backend::make_cpu_backend();
  EXPECT_NO_THROW(load_transformer(dir_, *backend));
}

TEST_F(BrokenCheckpoint, UnknownArchitectureListsSupportedOnes) {
  edit_config([](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; });
  auto backend = backend::make_cpu_backend();
  expect_error([&] { load_transformer(dir_, *backend); }, ErrorKind::kUnsupported,
               {"GPT2LMHeadModel", "LlamaForCausalLM", "InternLM2ForCausalLM", "InternLM3ForCausalLM",
                "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Phi3ForCausalLM", "MistralForCausalLM"});
}

TEST_F(BrokenCheckpoint, ShapeMismatchNamesFileAndTensor) {
  edit_config([](json& c) { c["intermediate_size"] = 64; });
  auto backend = backend::make_cpu_backend();
  expect_error([&] { load_transformer(dir_, *backend); }, ErrorKind::kInvalidArgument,
               {"model.safetensors", "mlp.gate_proj.weight", "[48, 32]", "[64, 32]"});
}

TEST_F(BrokenCheckpoint, MissingTensorIsNamed) {
  edit_config([](json& c) { c["num_hidden_layers"] = 2; });  // layer 1 is not in the file
  auto backend = backend::make_cpu_backend();
  expect_error([&] { load_transformer(dir_, *backend); }, ErrorKind::kInvalidArgument,
               {"model.layers.1.input_layernorm.weight"});
}

TEST_F(BrokenCheckpoint, IntegerWeightIsRefused) {
  {
    // The same checkpoint with model.norm.weight stored as i32.
    Checkpoint checkpoint = Checkpoint::open(dir_);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : checkpoint.names()) {
      Tensor t = checkpoint.get(name).tensor;
      tensors.push_back({name, name == "model.norm.weight" ? Tensor::empty(t.shape(), DType::kI32) : t.to_f32()});
    }
    write_safetensors(dir_ / "rewritten.tmp", tensors);
  }
  std::filesystem::rename(dir_ / "rewritten.tmp", dir_ / "model.safetensors");
  auto backend = backend::make_cpu_backend();
  expect_error([&] { load_transformer(dir_, *backend); }, ErrorKind::kInvalidArgument,
               {"model.safetensors", "model.norm.weight", "i32"});
}

}  // namespace
}  // namespace tessera::model
