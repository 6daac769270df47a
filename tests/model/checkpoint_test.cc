// Checkpoint::open: format order, sharded indexes, and the refusals a user
// meets with a wrong or incomplete model directory.
#include "model/loader/checkpoint.h"

#include <gtest/gtest.h>

#include "loader_test_util.h"

namespace tessera::model {
namespace {

using tessera::testing::expect_error;
using tessera::testing::raw_bytes;
using tessera::testing::safetensors_bytes;
using tessera::testing::TempDir;
using tessera::testing::write_file;

// One F32 tensor per name, each holding [value, value + 1].
std::string shard(const std::vector<std::pair<std::string, float>>& tensors) {
  std::string header = "{", data;
  for (const auto& [name, value] : tensors) {
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [" +
              std::to_string(data.size()) + ", " + std::to_string(data.size() + 8) + "]}";
    data += raw_bytes(std::vector<float>{value, value + 1});
  }
  return safetensors_bytes(header + "}", data);
}

void write_two_shards(const TempDir& dir, const std::string& index) {
  write_file(dir / "model-00001-of-00002.safetensors", shard({{"a", 1}, {"b", 3}}));
  write_file(dir / "model-00002-of-00002.safetensors", shard({{"c", 5}}));
  write_file(dir / "model.safetensors.index.json", index);
}

const char* kTwoShardIndex = R"({"metadata": {"total_size": 24}, "weight_map": {
    "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"}})";

TEST(Checkpoint, OpensSingleSafetensorsFile) {
  TempDir dir;
  write_file(dir / "model.safetensors", shard({{"x", 2}}));
  Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.names(), std::vector<std::string>{"x"});
  EXPECT_TRUE(checkpoint.contains("x"));
  const CheckpointTensor& x = checkpoint.get("x");
  EXPECT_EQ(x.tensor.data<float>()[1], 3.0f);
  EXPECT_NE(x.file.find("model.safetensors"), std::string::npos);
  EXPECT_EQ(checkpoint.dir(), dir.path());
}

TEST(Checkpoint, OpensAnyOtherSingleSafetensorsFile) {
  TempDir dir;
  write_file(dir / "consolidated.safetensors", shard({{"x", 2}}));
  EXPECT_TRUE(Checkpoint::open(dir.path()).contains("x"));
}

TEST(Checkpoint, OpensShardedSafetensors) {
  TempDir dir;
  write_two_shards(dir, kTwoShardIndex);
  Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(checkpoint.get("b").tensor.data<float>()[0], 3.0f);
  EXPECT_EQ(checkpoint.get("c").tensor.data<float>()[1], 6.0f);
  EXPECT_NE(checkpoint.get("c").file.find("model-00002-of-00002.safetensors"), std::string::npos);
}

TEST(Checkpoint, PrefersSafetensorsOverPytorchBin) {
  TempDir dir;
  write_file(dir / "model.safetensors", shard({{"x", 2}}));
  write_file(dir / "pytorch_model.bin", "not even a zip file");
  EXPECT_TRUE(Checkpoint::open(dir.path()).contains("x"));
}

TEST(Checkpoint, RefusesTensorMissingFromItsShard) {
  TempDir dir;
  write_two_shards(dir, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument,
               {"'d'", "model-00002-of-00002.safetensors", "model.safetensors.index.json"});
}

TEST(Checkpoint, RefusesMissingShardFile) {
  TempDir dir;
  write_two_shards(dir, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
      "z": "model-00003-of-00003.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument,
               {"model-00003-of-00003.safetensors", "does not exist", "'z'"});
}

TEST(Checkpoint, RefusesShardPathsOutsideTheDirectory) {
  TempDir dir;
  for (const std::string file : {"../model.safetensors", "/etc/passwd", "sub/../../x.safetensors", ""}) {
    write_two_shards(dir, R"({"weight_map": {"a": ")" + file + R"("}})");
    std::vector<std::string> needles = {"'a'", "model.safetensors.index.json", "not a file inside"};
    if (!file.empty()) needles.push_back(file);
    expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument, needles);
  }
}

TEST(Checkpoint, RefusesBrokenIndex) {
  TempDir dir;
  write_two_shards(dir, R"({"weight_map": )");
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument,
               {"model.safetensors.index.json", "not valid JSON"});
  write_two_shards(dir, R"({"metadata": {}})");
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument,
               {"model.safetensors.index.json", "weight_map"});
  write_two_shards(dir, R"({"weight_map": {"a": 1}})");
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument,
               {"model.safetensors.index.json", "'a'"});
}

TEST(Checkpoint, RefusesTensorInTwoShards) {
  TempDir dir;
  write_file(dir / "one.safetensors", shard({{"a", 1}}));
  write_file(dir / "two.safetensors", shard({{"a", 2}}));
  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "one.safetensors", "b": "two.safetensors"}})");
  // "b" is missing from two.safetensors, but the duplicate "a" or the missing
  // "b" must be reported; both name the files.
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument, {"two.safetensors"});
  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "one.safetensors", "a2": "two.safetensors"}})");
  write_file(dir / "two.safetensors", shard({{"a", 2}, {"a2", 3}}));
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument,
               {"'a'", "twice", "one.safetensors", "two.safetensors"});
}

TEST(Checkpoint, DanglingSymlinkNamesTheMissingFile) {
  // The Hugging Face cache links snapshot files to ../../blobs; a blob that
  // was never downloaded must be reported as that file, not as "no weights".
  TempDir dir;
  std::filesystem::create_symlink(dir / "blobs-missing", dir / "model.safetensors");
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument, {"model.safetensors", "cannot open"});
}

TEST(Checkpoint, FollowsSymlinkedShards) {
  TempDir dir;
  std::filesystem::create_directories(dir / "blobs");
  std::filesystem::create_directories(dir / "snapshot");
  write_file(dir / "blobs" / "abc123", shard({{"x", 2}}));
  std::filesystem::create_symlink("../blobs/abc123", dir / "snapshot" / "model.safetensors");
  EXPECT_TRUE(Checkpoint::open(dir / "snapshot").contains("x"));
}

TEST(Checkpoint, RefusesMissingDirectory) {
  TempDir dir;
  expect_error([&] { Checkpoint::open(dir / "no-such-model"); }, ErrorKind::kInvalidArgument,
               {"no-such-model", "does not exist"});
  write_file(dir / "a-file", "x");
  expect_error([&] { Checkpoint::open(dir / "a-file"); }, ErrorKind::kInvalidArgument, {"a-file", "not a directory"});
}

TEST(Checkpoint, EmptyDirectoryListsWhatWasLookedFor) {
  TempDir dir;
  write_file(dir / "config.json", "{}");
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument,
               {dir.path().string(), "model.safetensors.index.json", "model.safetensors", "*.safetensors",
                "pytorch_model.bin.index.json", "pytorch_model.bin"});
}

TEST(Checkpoint, RefusesSeveralSafetensorsWithoutIndex) {
  TempDir dir;
  write_file(dir / "a.safetensors", shard({{"x", 1}}));
  write_file(dir / "b.safetensors", shard({{"y", 1}}));
  expect_error([&] { Checkpoint::open(dir.path()); }, ErrorKind::kInvalidArgument,
               {"a.safetensors", "b.safetensors", "index"});
}

TEST(Checkpoint, GetOfMissingTensorNamesTensorAndDirectory) {
  TempDir dir;
  write_file(dir / "model.safetensors", shard({{"x", 2}}));
  Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_FALSE(checkpoint.contains("model.layers.0.attn.wqkv.weight"));
  expect_error([&] { checkpoint.get("model.layers.0.attn.wqkv.weight"); }, ErrorKind::kInvalidArgument,
               {"'model.layers.0.attn.wqkv.weight'", dir.path().string()});
}

}  // namespace
}  // namespace tessera::model
