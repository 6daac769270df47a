// pytorch_model.bin: torch.save's zip archive read by the restricted unpickler.
//
// torch is not available to the tests, so the archives are written here byte
// by byte. The pickles are exactly what Python's pickle emits for a torch
// state dict (checked with pickletools against a stand-in `torch` module whose
// tensors reduce as torch.Tensor.__reduce_ex__ does). RealTorchSaveFile reads
// a file written by real torch (tools/make_torch_bin_fixture.py) when present.
#include "model/loader/pytorch_bin.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../test_paths.h"
#include "core/dtype.h"
#include "loader_test_util.h"
#include "model/loader/checkpoint.h"
#include "model/loader/mapped_file.h"

namespace tessera::model {
namespace {

using tessera::testing::expect_error;
using tessera::testing::raw_bytes;
using tessera::testing::replace_once;
using tessera::testing::TempDir;
using tessera::testing::write_file;
using tessera::testing::zip_bytes;
using tessera::testing::ZipInput;

// torch.save({'w': torch.arange(6, dtype=torch.float32).reshape(2, 3)}), data.pkl:
//     0: \x80 PROTO      2
//     2: }    EMPTY_DICT
//     3: q    BINPUT     0
//     5: X    BINUNICODE 'w'
//    11: q    BINPUT     1
//    13: c    GLOBAL     'torch._utils _rebuild_tensor_v2'
//    46: q    BINPUT     2
//    48: (    MARK
//    49: (        MARK                       persistent id of the storage:
//    50: X            BINUNICODE 'storage'
//    62: q            BINPUT     3
//    64: c            GLOBAL     'torch FloatStorage'
//    84: q            BINPUT     4
//    86: X            BINUNICODE '0'        key: the entry archive/data/0
//    92: q            BINPUT     5
//    94: X            BINUNICODE 'cpu'      location
//   102: q            BINPUT     6
//   104: K            BININT1    6          numel of the storage
//   106: t            TUPLE      (MARK at 49)
//   107: q        BINPUT     7
//   109: Q        BINPERSID
//   110: K        BININT1    0              storage_offset
//   112: K        BININT1    2
//   114: K        BININT1    3
//   116: \x86     TUPLE2                    size (2, 3)
//   117: q        BINPUT     8
//   119: K        BININT1    3
//   121: K        BININT1    1
//   123: \x86     TUPLE2                    stride (3, 1)
//   124: q        BINPUT     9
//   126: \x89     NEWFALSE                  requires_grad
//   127: c        GLOBAL     'collections OrderedDict'
//   152: q        BINPUT     10
//   154: )        EMPTY_TUPLE
//   155: R        REDUCE                    backward_hooks = OrderedDict()
//   156: q        BINPUT     11
//   158: t        TUPLE      (MARK at 48)
//   159: q    BINPUT     12
//   161: R    REDUCE                        _rebuild_tensor_v2(*args)
//   162: q    BINPUT     13
//   164: s    SETITEM
//   165: .    STOP
const char kArangePickle[] =
    "\x80\x02}q\x00X\x01\x00\x00\x00wq\x01"
    "ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00"
    "\x00\x00storageq\x03"
    "ctorch\nFloatStorage\nq\x04X\x01\x00\x00\x00"
    "0q\x05X\x03\x00\x00\x00"
    "cpuq\x06K\x06tq\x07QK\x00K\x02K\x03\x86q\x08K\x03K\x01\x86q\x09\x89"
    "ccollections\nOrdered"
    "Dict\nq\n)Rq\x0btq\x0cRq\x0ds.";

// model.state_dict()-style: an OrderedDict with _metadata (set by BUILD),
// 'a' f32 (2, 3) and 'b' = a's storage from element 3 as (3,) (a view saved
// with its shared storage), 'h' f16 (4,) in storage '1'. Protocol 2:
const char kStateDictPickle2[] =
    "\x80\x02"
    "ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00"
    "aq\x02"
    "ctorch._uti"
    "ls\n_rebuild_tensor_v2\nq\x03((X\x07\x00\x00\x00storageq\x04"
    "ctorch\nFloatStorage\nq\x05X"
    "\x01\x00\x00\x00"
    "0q\x06X\x03\x00\x00\x00"
    "cpuq\x07K\x06tq\x08QK\x00K\x02K\x03\x86q\x09K\x03"
    "K\x01\x86q\n\x89h\x00)Rq\x0btq\x0cRq\x0dX\x01\x00\x00\x00"
    "bq\x0eh\x03((h\x04h\x05h\x06h\x07"
    "K\x06tq\x0fQK\x03K\x03\x85q\x10K\x01\x85q\x11\x89h\x00)Rq\x12tq\x13Rq\x14X\x01\x00\x00\x00h"
    "q\x15h\x03((h\x04"
    "ctorch\nHalfStorage\nq\x16X\x01\x00\x00\x00"
    "1q\x17h\x07K\x04tq\x18QK\x00"
    "K\x04\x85q\x19h\x11\x89h\x00)Rq\x1atq\x1bRq\x1cu}q\x1dX\x09\x00\x00\x00_metadataq\x1eh\x00)"
    "Rq\x1fX\x00\x00\x00\x00q }q!X\x07\x00\x00\x00versionq\x22K\x01sssb.";

// The same state dict at protocol 4 (torch.save(..., pickle_protocol=4)):
// FRAME, SHORT_BINUNICODE, STACK_GLOBAL, MEMOIZE.
const char kStateDictPickle4[] =
    "\x80\x04\x95$\x01\x00\x00\x00\x00\x00\x00\x8c\x0b"
    "collections\x94\x8c\x0bOrderedDict\x94\x93"
    "\x94)R\x94(\x8c\x01"
    "a\x94\x8c\x0ctorch._utils\x94\x8c\x12_rebuild_tensor_v2\x94\x93\x94(("
    "\x8c\x07storage\x94\x8c\x05torch\x94\x8c\x0c"
    "FloatStorage\x94\x93\x94\x8c\x01"
    "0\x94\x8c"
    "\x03"
    "cpu\x94K\x06t\x94QK\x00K\x02K\x03\x86\x94K\x03K\x01\x86\x94\x89h\x02)R\x94t\x94R\x94"
    "\x8c\x01"
    "b\x94h\x07((h\x08h\x0bh\x0ch\x0dK\x06t\x94QK\x03K\x03\x85\x94K\x01\x85\x94\x89h\x02"
    ")R\x94t\x94R\x94\x8c\x01h\x94h\x07((h\x08h\x09\x8c\x0bHalfStorage\x94\x93\x94\x8c\x01"
    "1\x94"
    "h\x0dK\x04t\x94QK\x00K\x04\x85\x94h\x17\x89h\x02)R\x94t\x94R\x94u}\x94\x8c\x09_metadata\x94"
    "h\x02)R\x94\x8c\x00\x94}\x94\x8c\x07version\x94K\x01sssb.";

template <size_t N>
std::string bytes_of(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

std::string arange_f32(int n) {
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[i] = static_cast<float>(i);
  return raw_bytes(values);
}

std::string half_values() {
  return raw_bytes(std::vector<uint16_t>{f32_to_f16(0.5f), f32_to_f16(-1.0f), f32_to_f16(2.0f), f32_to_f16(65504.0f)});
}

// The archive torch.save writes, for a pickle and its storages.
std::string torch_zip(const std::string& pickle, std::vector<ZipInput> storages, bool zip64 = false,
                      const std::string& byteorder = "little") {
  std::vector<ZipInput> files = {{"archive/data.pkl", pickle}, {"archive/byteorder", byteorder}};
  for (ZipInput& storage : storages) {
    storage.name = "archive/data/" + storage.name;
    files.push_back(std::move(storage));
  }
  files.push_back({"archive/version", "3\n"});
  files.push_back({"archive/.data/serialization_id", "1234567890"});
  return zip_bytes(files, zip64);
}

TensorMap load(const TempDir& dir, const std::string& archive) {
  write_file(dir / "pytorch_model.bin", archive);
  return read_pytorch_bin(MappedFile::open(dir / "pytorch_model.bin"));
}

void expect_refused(const std::string& archive, const std::vector<std::string>& needles,
                    ErrorKind kind = ErrorKind::kInvalidArgument) {
  TempDir dir;
  std::vector<std::string> with_file = needles;
  with_file.push_back("pytorch_model.bin");
  expect_error([&] { load(dir, archive); }, kind, with_file);
}

TEST(PyTorchBin, LoadsTorchSaveOfOneTensor) {
  TempDir dir;
  TensorMap tensors = load(dir, torch_zip(bytes_of(kArangePickle), {{"0", arange_f32(6)}}));
  ASSERT_EQ(tensors.size(), 1u);
  const Tensor& w = tensors.at("w");
  EXPECT_EQ(w.dtype(), DType::kF32);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w.data<float>()[i], static_cast<float>(i));
  // torch pads entries so storages start 64-byte aligned; the view keeps that.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.raw_data()) % 64, 0u);
}

void check_state_dict(const TensorMap& tensors) {
  ASSERT_EQ(tensors.size(), 3u);
  const Tensor& a = tensors.at("a");
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.data<float>()[5], 5.0f);
  const Tensor& b = tensors.at("b");  // shares a's storage from element 3
  EXPECT_EQ(b.shape(), (Shape{3}));
  EXPECT_EQ(b.data<float>()[0], 3.0f);
  EXPECT_EQ(b.data<float>()[2], 5.0f);
  const Tensor& h = tensors.at("h");
  EXPECT_EQ(h.dtype(), DType::kF16);
  Tensor h32 = h.to_f32();
  EXPECT_EQ(h32.data<float>()[0], 0.5f);
  EXPECT_EQ(h32.data<float>()[3], 65504.0f);
}

TEST(PyTorchBin, LoadsOrderedDictStateDictProtocol2) {
  TempDir dir;
  check_state_dict(load(dir, torch_zip(bytes_of(kStateDictPickle2), {{"0", arange_f32(6)}, {"1", half_values()}})));
}

TEST(PyTorchBin, LoadsOrderedDictStateDictProtocol4) {
  TempDir dir;
  check_state_dict(load(dir, torch_zip(bytes_of(kStateDictPickle4), {{"0", arange_f32(6)}, {"1", half_values()}})));
}

TEST(PyTorchBin, LoadsZip64Archive) {
  TempDir dir;
  check_state_dict(
      load(dir, torch_zip(bytes_of(kStateDictPickle2), {{"0", arange_f32(6)}, {"1", half_values()}}, true)));
}

TEST(PyTorchBin, CheckpointOpensShardedBins) {
  TempDir dir;
  write_file(dir / "pytorch_model-00001-of-00002.bin", torch_zip(bytes_of(kArangePickle), {{"0", arange_f32(6)}}));
  std::string pickle =
      replace_once(bytes_of(kArangePickle), bytes_of("X\x01\x00\x00\x00wq"), bytes_of("X\x01\x00\x00\x00vq"));
  write_file(dir / "pytorch_model-00002-of-00002.bin", torch_zip(pickle, {{"0", arange_f32(6)}}));
  write_file(dir / "pytorch_model.bin.index.json",
             R"({"weight_map": {"w": "pytorch_model-00001-of-00002.bin", "v": "pytorch_model-00002-of-00002.bin"}})");
  Checkpoint checkpoint = Checkpoint::open(dir.path());
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"v", "w"}));
  EXPECT_EQ(checkpoint.get("v").tensor.data<float>()[4], 4.0f);
}

TEST(PyTorchBin, RefusesOsSystem) {
  // pickle.dumps of a class whose __reduce__ returns (os.system, ('echo pwned',)):
  // GLOBAL 'os system', the argument tuple, REDUCE.
  const std::string pickle = bytes_of(
      "\x80\x02"
      "cos\nsystem\nq\x00X\x0a\x00\x00\x00"
      "echo pwnedq\x01\x85q\x02Rq\x03.");
  expect_refused(torch_zip(pickle, {}), {"refusing to load", "os.system", "never executes code"});
  const std::string posix = bytes_of(
      "\x80\x02"
      "cposix\nsystem\nX\x02\x00\x00\x00id\x85R.");
  expect_refused(torch_zip(posix, {}), {"posix.system"});
}

TEST(PyTorchBin, RefusesEvalHiddenInsideTheStateDict) {
  // A protocol-4 STACK_GLOBAL for builtins.eval as a dict value: refused at
  // the GLOBAL itself, before anything could call it.
  const std::string pickle = bytes_of(
      "\x80\x04}\x94\x8c\x01w\x94\x8c\x08"
      "builtins\x94\x8c\x04"
      "eval\x94\x93\x94\x8c\x01"
      "1\x94\x85R\x94s.");
  expect_refused(torch_zip(pickle, {}), {"builtins.eval"});
}

TEST(PyTorchBin, RefusesCompressedStorage) {
  std::string archive = torch_zip(bytes_of(kArangePickle), {{"0", arange_f32(6), 8}});
  expect_refused(archive, {"'w'", "archive/data/0", "compressed"});
}

TEST(PyTorchBin, RefusesBadZip) {
  expect_refused("PK\x03\x04 this is not really a zip archive at all", {"not a valid zip archive"});
  std::string archive = torch_zip(bytes_of(kArangePickle), {{"0", arange_f32(6)}});
  expect_refused(archive.substr(0, archive.size() - 30), {"not a valid zip archive"});  // EOCD cut off
  std::string bad_offset = archive;
  bad_offset[bad_offset.size() - 3] = 0x7f;  // central directory offset far past the end
  expect_refused(bad_offset, {"not a valid zip archive", "central directory"});
  expect_refused(tessera::testing::zip_bytes({{"weights.npy", "x"}}), {"data.pkl"});
}

TEST(PyTorchBin, RefusesLegacyFormat) {
  expect_refused(bytes_of("\x80\x02\x8a\x0al\xfc\x9c"
                          "F\xf9 j\xa8P\x19."),
                 {"legacy"}, ErrorKind::kUnsupported);
}

TEST(PyTorchBin, RefusesBigEndianArchive) {
  std::string archive = torch_zip(bytes_of(kArangePickle), {{"0", arange_f32(6)}}, false, "big");
  expect_refused(archive, {"byte order"}, ErrorKind::kUnsupported);
}

TEST(PyTorchBin, RefusesNonContiguousTensor) {
  // stride (1, 2) instead of (3, 1): a transposed view.
  std::string pickle = replace_once(bytes_of(kArangePickle), "K\x03K\x01\x86", "K\x01K\x02\x86");
  expect_refused(torch_zip(pickle, {{"0", arange_f32(6)}}), {"'w'", "not contiguous"});
}

TEST(PyTorchBin, RefusesTensorOutsideItsStorage) {
  std::string pickle = replace_once(bytes_of(kArangePickle), std::string("QK\x00", 3), "QK\x01");  // offset 1 + 6 > 6
  expect_refused(torch_zip(pickle, {{"0", arange_f32(6)}}), {"'w'", "outside its storage"});
  // The storage claims 6 floats but the entry holds 5.
  expect_refused(torch_zip(bytes_of(kArangePickle), {{"0", arange_f32(5)}}), {"'w'", "archive/data/0", "20 bytes"});
}

TEST(PyTorchBin, RefusesMissingStorageEntry) {
  expect_refused(torch_zip(bytes_of(kArangePickle), {{"7", arange_f32(6)}}), {"'w'", "archive/data/0", "missing"});
}

TEST(PyTorchBin, RefusesUnknownOpcode) {
  // NEWOBJ (0x81) where the state dict's first value would be built.
  std::string pickle = replace_once(bytes_of(kArangePickle),
                                    "q\x0d"
                                    "s.",
                                    "\x81q\x0d"
                                    "s.");
  expect_refused(torch_zip(pickle, {{"0", arange_f32(6)}}), {"0x81", "NEWOBJ", "offset 162", "archive/data.pkl"});
}

TEST(PyTorchBin, RefusesTruncatedPickle) {
  std::string pickle = bytes_of(kArangePickle);
  expect_refused(torch_zip(pickle.substr(0, 107), {{"0", arange_f32(6)}}), {"before STOP"});
  expect_refused(torch_zip(pickle.substr(0, 100), {{"0", arange_f32(6)}}), {"offset 94", "runs past the end"});
}

TEST(PyTorchBin, RefusesNonTensorValues) {
  const std::string pickle = bytes_of("\x80\x02}q\x00X\x01\x00\x00\x00wq\x01K\x07s.");  // {'w': 7}
  expect_refused(torch_zip(pickle, {}), {"'w'", "not a tensor"});
}

// A real torch.save file, when tools/make_torch_bin_fixture.py has been run
// on a machine with torch and its output committed.
TEST(PyTorchBin, RealTorchSaveFile) {
  const std::filesystem::path dir = tessera::testing::fixtures_dir() / "torch_bin";
  if (!std::filesystem::exists(dir / "expected.json")) {
    GTEST_SKIP() << dir << " not found: run tools/make_torch_bin_fixture.py " << dir
                 << " on a machine with torch and commit the result";
  }
  std::ifstream in(dir / "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  std::vector<std::filesystem::path> model_dirs = {dir};
  for (const auto& variant : expected.value("variants", std::vector<std::string>{}))
    model_dirs.push_back(dir / variant);
  for (const auto& model_dir : model_dirs) {
    SCOPED_TRACE(model_dir.string());
    Checkpoint checkpoint = Checkpoint::open(model_dir);
    EXPECT_EQ(checkpoint.names().size(), expected["tensors"].size());
    for (const auto& [name, info] : expected["tensors"].items()) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(checkpoint.contains(name));
      const Tensor& tensor = checkpoint.get(name).tensor;
      DType dtype;
      ASSERT_TRUE(dtype_from_safetensors(info["dtype"].get<std::string>(), &dtype));
      EXPECT_EQ(tensor.dtype(), dtype);
      EXPECT_EQ(tensor.shape(), info["shape"].get<Shape>());
      const auto& values = info["values"];  // the first elements, as numbers
      ASSERT_LE(values.size(), static_cast<size_t>(tensor.numel()));
      for (size_t i = 0; i < values.size(); ++i) {
        const double want = values[i].get<double>();
        double got = 0;
        const auto* p = static_cast<const std::byte*>(tensor.raw_data());
        switch (dtype) {
          case DType::kI64: got = static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]); break;
          case DType::kI32: got = reinterpret_cast<const int32_t*>(p)[i]; break;
          case DType::kI16: got = reinterpret_cast<const int16_t*>(p)[i]; break;
          case DType::kI8: got = reinterpret_cast<const int8_t*>(p)[i]; break;
          case DType::kU8:
          case DType::kBool: got = reinterpret_cast<const uint8_t*>(p)[i]; break;
          case DType::kF64: got = reinterpret_cast<const double*>(p)[i]; break;
          default: {
            float f = 0;
            convert_to_f32(dtype, p + dtype_bytes(dtype, i), &f, 1);
            got = f;
          }
        }
        EXPECT_EQ(got, want) << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::model
