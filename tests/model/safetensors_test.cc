// safetensors reader: a valid file gives the right views; every kind of broken
// header is refused with Error(kInvalidArgument) naming the file and tensor.
#include "model/loader/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/dtype.h"
#include "loader_test_util.h"
#include "model/loader/mapped_file.h"

namespace tessera::model {
namespace {

using tessera::testing::expect_error;
using tessera::testing::raw_bytes;
using tessera::testing::safetensors_bytes;
using tessera::testing::TempDir;
using tessera::testing::write_file;

// Writes `header` + `data` as a safetensors file and reads it.
TensorMap load(const TempDir& dir, const std::string& header, const std::string& data,
               const std::string& name = "model.safetensors") {
  write_file(dir / name, safetensors_bytes(header, data));
  return read_safetensors(MappedFile::open(dir / name));
}

void expect_refused(const std::string& header, const std::string& data, const std::vector<std::string>& needles) {
  TempDir dir;
  std::vector<std::string> with_file = needles;
  with_file.push_back("model.safetensors");
  expect_error([&] { load(dir, header, data); }, ErrorKind::kInvalidArgument, with_file);
}

TEST(Safetensors, LoadsDtypesShapesAndValues) {
  TempDir dir;
  std::vector<float> w = {0, 1, 2, 3, 4, 5};
  std::vector<uint16_t> b = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f)};
  std::vector<int64_t> ids = {7};
  std::string data = raw_bytes(w) + raw_bytes(b) + raw_bytes(ids);
  TensorMap tensors = load(dir,
                           R"({"__metadata__": {"format": "pt"},
                               "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                               "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
                               "ids": {"dtype": "I64", "shape": [1], "data_offsets": [28, 36]},
                               "empty": {"dtype": "F16", "shape": [0, 4], "data_offsets": [36, 36]}})",
                           data);
  ASSERT_EQ(tensors.size(), 4u);
  const Tensor& wt = tensors.at("w");
  EXPECT_EQ(wt.dtype(), DType::kF32);
  EXPECT_EQ(wt.shape(), (Shape{2, 3}));
  EXPECT_TRUE(wt.contiguous());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(wt.data<float>()[i], static_cast<float>(i));
  const Tensor& bt = tensors.at("b");
  EXPECT_EQ(bt.dtype(), DType::kBF16);
  Tensor b32 = bt.to_f32();
  EXPECT_EQ(b32.data<float>()[0], 1.5f);
  EXPECT_EQ(b32.data<float>()[1], -2.0f);
  int64_t id = 0;
  std::memcpy(&id, tensors.at("ids").raw_data(), sizeof(id));  // offset 28: not 8-byte aligned
  EXPECT_EQ(id, 7);
  EXPECT_EQ(tensors.at("empty").numel(), 0);
  EXPECT_EQ(tensors.at("empty").shape(), (Shape{0, 4}));
}

TEST(Safetensors, ViewsKeepTheMappingAlive) {
  TempDir dir;
  Tensor kept;
  {
    TensorMap tensors = load(dir, R"({"x": {"dtype": "I32", "shape": [], "data_offsets": [0, 4]}})",
                             raw_bytes(std::vector<int32_t>{42}));
    kept = tensors.at("x");
  }
  EXPECT_EQ(kept.rank(), 0);
  EXPECT_EQ(kept.data<int32_t>()[0], 42);
}

TEST(Safetensors, RefusesFileShorterThanHeaderLength) {
  TempDir dir;
  write_file(dir / "model.safetensors", "abc");
  expect_error([&] { read_safetensors(MappedFile::open(dir / "model.safetensors")); }, ErrorKind::kInvalidArgument,
               {"model.safetensors", "too short"});
  write_file(dir / "empty.safetensors", "");
  expect_error([&] { read_safetensors(MappedFile::open(dir / "empty.safetensors")); }, ErrorKind::kInvalidArgument,
               {"empty.safetensors"});
}

TEST(Safetensors, RefusesHeaderLengthBeyondFile) {
  TempDir dir;
  std::string bytes = safetensors_bytes(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", "1234");
  bytes[0] = static_cast<char>(0xf0);  // header claims 240+ bytes
  write_file(dir / "model.safetensors", bytes);
  expect_error([&] { read_safetensors(MappedFile::open(dir / "model.safetensors")); }, ErrorKind::kInvalidArgument,
               {"model.safetensors", "past the end"});
  bytes[6] = 1;  // ~2^48: beyond any sane header
  write_file(dir / "model.safetensors", bytes);
  expect_error([&] { read_safetensors(MappedFile::open(dir / "model.safetensors")); }, ErrorKind::kInvalidArgument,
               {"model.safetensors", "limit"});
}

TEST(Safetensors, RefusesInvalidJson) {
  expect_refused(R"({"x": {"dtype": "F32", )", "", {"not valid JSON"});
  expect_refused(R"([1, 2])", "", {"not a JSON object"});
}

TEST(Safetensors, RefusesUnknownDtype) {
  expect_refused(R"({"x": {"dtype": "F8_E5M2", "shape": [1], "data_offsets": [0, 1]}})", "1", {"'x'", "F8_E5M2"});
}

TEST(Safetensors, RefusesMalformedEntries) {
  expect_refused(R"({"x": 3})", "", {"'x'"});
  expect_refused(R"({"x": {"shape": [1], "data_offsets": [0, 4]}})", "1234", {"'x'", "dtype"});
  expect_refused(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "1234", {"'x'", "shape"});
  expect_refused(R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "1234", {"'x'", "shape"});
  expect_refused(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "1234", {"'x'", "data_offsets"});
  expect_refused(R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", "1234",
                 {"'x'", "elements"});
}

TEST(Safetensors, RefusesSizeShapeMismatch) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", std::string(24, '\0'),
                 {"'w'", "20 bytes", "24 bytes"});
}

TEST(Safetensors, RefusesOffsetsOutOfRange) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", std::string(8, '\0'),
                 {"'w'", "past the 8 byte data section"});
  expect_refused(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", std::string(8, '\0'),
                 {"'w'", "end before"});
}

TEST(Safetensors, RefusesOverlappingTensors) {
  expect_refused(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                 std::string(12, '\0'), {"'a'", "'b'", "overlap"});
}

TEST(Safetensors, RefusesTensorNamedTwice) {
  expect_refused(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                     "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                 "12", {"'a'", "twice"});
}

TEST(MappedFile, MissingFileNamesThePath) {
  TempDir dir;
  expect_error([&] { MappedFile::open(dir / "nope.safetensors"); }, ErrorKind::kInvalidArgument, {"nope.safetensors"});
}

TEST(MappedFile, EmptyFileHasNoMapping) {
  TempDir dir;
  write_file(dir / "empty", "");
  auto file = MappedFile::open(dir / "empty");
  EXPECT_EQ(file->size(), 0u);
  EXPECT_EQ(file->data(), nullptr);
}

}  // namespace
}  // namespace tessera::model
