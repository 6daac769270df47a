// The loader streams a checkpoint part by part (weights.h): the globals, then
// each layer once, in order, each part holding only its own tensors, so the
// host never holds the whole model in f32.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../test_paths.h"
#include "backend/backend.h"
#include "core/error.h"
#include "model/loader/hf_config.h"
#include "model/transformer.h"
#include "model/weights.h"

namespace tessera::model {
namespace {

std::filesystem::path golden(const std::string& name) { return testing::fixtures_dir() / "golden" / name; }

TEST(WeightParts, EachPartHoldsOnlyItsOwnTensors) {
  const HostModel model = read_host_model(golden("llama_hd64_gqa4"));
  ASSERT_EQ(model.spec.num_layers, 2);
  const CanonicalWeights globals = model.part(kGlobalWeights);
  EXPECT_TRUE(globals.contains("embed"));
  EXPECT_TRUE(globals.contains("final_norm"));
  EXPECT_TRUE(globals.contains("lm_head"));  // untied in this model
  for (const auto& [name, tensor] : globals) EXPECT_FALSE(name.starts_with("layers.")) << name;
  for (int64_t layer = 0; layer < model.spec.num_layers; ++layer) {
    const CanonicalWeights part = model.part(layer);
    const std::string prefix = "layers." + std::to_string(layer) + ".";
    EXPECT_TRUE(part.contains(prefix + "qkv") && part.contains(prefix + "down")) << "layer " << layer;
    for (const auto& [name, tensor] : part) EXPECT_TRUE(name.starts_with(prefix)) << name << " in layer " << layer;
  }
}

TEST(WeightParts, PartsTogetherAreTheWholeModel) {
  const HostModel model = read_host_model(golden("internlm2_gqa2"));
  const CanonicalWeights whole = assemble_weights(model.spec, *model.architecture, *model.checkpoint);
  size_t seen = 0;
  for (int64_t part = kGlobalWeights; part < model.spec.num_layers; ++part) {
    for (const auto& [name, tensor] : model.part(part)) {
      ++seen;
      ASSERT_TRUE(whole.contains(name)) << name;
      const Tensor& other = whole.at(name);
      ASSERT_EQ(tensor.shape(), other.shape()) << name;
      EXPECT_EQ(std::memcmp(tensor.raw_data(), other.raw_data(), tensor.nbytes()), 0) << name;
    }
  }
  EXPECT_EQ(seen, whole.size());
}

TEST(WeightParts, UploadAsksForTheGlobalsThenEachLayerOnceInOrder) {
  const HostModel model = read_host_model(golden("llama_hd64_gqa4"));
  auto backend = backend::make_cpu_backend();
  std::vector<int64_t> asked;
  const WeightParts parts = [&](int64_t part) {
    asked.push_back(part);
    return model.part(part);
  };
  const ModelWeights weights = upload_weights(model.spec, parts, make_tp_shard(model.spec, 0, 1), *backend, true);
  EXPECT_EQ(asked, (std::vector<int64_t>{kGlobalWeights, 0, 1}));
  ASSERT_EQ(weights.layers.size(), 2u);
  EXPECT_TRUE(weights.layers[1].down.defined());
  EXPECT_TRUE(weights.lm_head.defined());
}

// A part outside the model is the caller's mistake (kInternal), not a
// checkpoint missing a layer's tensors (kInvalidArgument).
TEST(WeightParts, NoSuchLayerIsAnInternalError) {
  const HostModel model = read_host_model(golden("llama_hd64_gqa4"));
  for (int64_t part : {int64_t{2}, int64_t{-2}}) {
    try {
      model.part(part);
      ADD_FAILURE() << "part " << part << " was assembled";
    } catch (const tessera::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << "part " << part << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera::model
