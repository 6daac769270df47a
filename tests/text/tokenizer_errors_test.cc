// Every way a tokenizer directory or a llama2.c tokenizer.bin can be wrong
// gives an Error of the right kind that names the file (or directory) and,
// for tokenizer.json, the component.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include "../test_paths.h"
#include "core/error.h"
#include "text/demo_tokenizer.h"
#include "text/json_field.h"
#include "text/llama2c_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

class textTokenizerErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_tokenizer_errors_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
  }

  // A valid tokenizer directory (the demo one) whose tokenizer.json is edited by `edit`.
  fs::path edited_demo(const std::function<void(nlohmann::json&)>& edit) {
    const fs::path model = dir_ / "edited";
    write_demo_tokenizer(model);
    nlohmann::json json = read_json_file(model / "tokenizer.json");
    edit(json);
    write(model / "tokenizer.json", json.dump());
    return model;
  }

  fs::path dir_;
};

// Runs `action`, expects an Error of `kind` whose text contains every one of `parts`.
void expect_error(const std::function<void()>& action, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    action();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_F(textTokenizerErrorsTest, MissingDirectoryAndFiles) {
  expect_error([&] { load_tokenizer(dir_ / "absent"); }, ErrorKind::kInvalidArgument, {"absent", "does not exist"});
  expect_error([&] { load_tokenizer(dir_); }, ErrorKind::kInvalidArgument,
               {dir_.string(), "tokenizer.json", "tokenizer.model"});
  write(dir_ / "tokenizer.model", "sentencepiece bytes");
  expect_error([&] { load_tokenizer(dir_); }, ErrorKind::kInvalidArgument,
               {(dir_ / "tokenizer.model").string(), "not a SentencePiece model"});
}

TEST_F(textTokenizerErrorsTest, MalformedJson) {
  write(dir_ / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ");
  expect_error([&] { load_tokenizer(dir_); }, ErrorKind::kInvalidArgument,
               {(dir_ / "tokenizer.json").string(), "not valid JSON"});
  write(dir_ / "tokenizer.json", "[1, 2, 3]");
  expect_error([&] { load_tokenizer(dir_); }, ErrorKind::kInvalidArgument, {"expected a JSON object"});
  write(dir_ / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"merges\": []}}");
  expect_error([&] { load_tokenizer(dir_); }, ErrorKind::kInvalidArgument, {"model", "missing field \"vocab\""});
}

TEST_F(textTokenizerErrorsTest, InconsistentModel) {
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["model"]["merges"].push_back("zz qq"); })); },
               ErrorKind::kInvalidArgument, {"model.merges[", "\"zz\" is not in model.vocab"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["model"]["merges"].push_back("nospace"); })); },
               ErrorKind::kInvalidArgument, {"two pieces"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["model"]["vocab"]["bad"] = -4; })); },
               ErrorKind::kInvalidArgument, {"model.vocab[\"bad\"]", "out of range"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["model"]["vocab"]["bad"] = "7"; })); },
               ErrorKind::kInvalidArgument, {"expected an integer"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["model"]["unk_token"] = "<nope>"; })); },
               ErrorKind::kInvalidArgument, {"model.unk_token", "<nope>"});
}

TEST_F(textTokenizerErrorsTest, UnsupportedComponents) {
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["normalizer"] = {{"type", "Precompiled"}}; })); },
               ErrorKind::kUnsupported, {"normalizer", "Precompiled"});
  expect_error(
      [&] {
        load_tokenizer(edited_demo([](auto& j) { j["normalizer"]["normalizers"][1]["type"] = "Lowercase"; }));
      },
      ErrorKind::kUnsupported, {"normalizer.normalizers[1]", "Lowercase"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; })); },
               ErrorKind::kUnsupported, {"pre_tokenizer", "Whitespace"});
  expect_error(
      [&] {
        load_tokenizer(edited_demo([](auto& j) {
          j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
        }));
      },
      ErrorKind::kInvalidArgument, {"pre_tokenizer.pattern", "does not compile"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; })); },
               ErrorKind::kUnsupported, {"decoder", "WordPiece"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["post_processor"] = {{"type", "BertProcessing"}}; })); },
               ErrorKind::kUnsupported, {"post_processor", "BertProcessing"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["model"]["type"] = "Unigram"; })); },
               ErrorKind::kUnsupported, {"model", "Unigram"});
  expect_error([&] { load_tokenizer(edited_demo([](auto& j) { j["model"]["dropout"] = 0.1; })); },
               ErrorKind::kUnsupported, {"dropout"});
  expect_error(
      [&] {
        load_tokenizer(edited_demo([](auto& j) {
          j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
        }));
      },
      ErrorKind::kUnsupported, {"Regex"});
}

TEST_F(textTokenizerErrorsTest, ConfigNamesUnknownToken) {
  const fs::path model = dir_ / "config";
  write_demo_tokenizer(model);
  write(model / "tokenizer_config.json", R"({"bos_token": {"content": "<bos>"}, "add_bos_token": true})");
  expect_error([&] { load_tokenizer(model); }, ErrorKind::kInvalidArgument, {"bos_token", "<bos>"});
  write(model / "tokenizer_config.json", R"({"add_eos_token": true})");
  expect_error([&] { load_tokenizer(model); }, ErrorKind::kInvalidArgument, {"add_eos_token"});
  write(model / "tokenizer_config.json", R"({"add_bos_token": "yes"})");
  expect_error([&] { load_tokenizer(model); }, ErrorKind::kInvalidArgument,
               {"tokenizer_config.json: add_bos_token", "true or false"});
}

// tok512.bin's bytes, for corrupting.
std::string tok512_bytes() {
  std::ifstream in(testing::testdata_dir() / "models/stories260K/tok512.bin", std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(textTokenizerErrorsTest, Llama2cFileValidation) {
  const fs::path out = dir_ / "out";
  expect_error([&] { write_llama2c_tokenizer(dir_ / "absent.bin", out, 512, 512); }, ErrorKind::kInvalidArgument,
               {"absent.bin"});
  write(dir_ / "tiny.bin", "\x07");
  expect_error([&] { write_llama2c_tokenizer(dir_ / "tiny.bin", out, 512, 512); }, ErrorKind::kInvalidArgument,
               {"tiny.bin", "truncated"});
  expect_error([&] { write_llama2c_tokenizer(dir_ / "tiny.bin", out, 100, 512); }, ErrorKind::kInvalidArgument,
               {"too small"});

  TESSERA_REQUIRE_TESTDATA("models/stories260K/tok512.bin");
  const std::string good = tok512_bytes();
  write(dir_ / "cut.bin", good.substr(0, good.size() - 3));
  expect_error([&] { write_llama2c_tokenizer(dir_ / "cut.bin", out, 512, 512); }, ErrorKind::kInvalidArgument,
               {"cut.bin", "truncated in the piece of token 511"});
  // A vocab size that does not belong to the file: too large runs off its
  // end, too small leaves bytes over.
  expect_error([&] { write_llama2c_tokenizer(dir_ / "cut.bin", out, 32000, 512); }, ErrorKind::kInvalidArgument,
               {"truncated"});
  write(dir_ / "good.bin", good);
  expect_error([&] { write_llama2c_tokenizer(dir_ / "good.bin", out, 500, 512); }, ErrorKind::kInvalidArgument,
               {"good.bin", "bytes follow the 500 tokens"});

  std::string absurd = good;
  const int32_t huge = 1 << 30;
  std::memcpy(absurd.data() + 4 + 4, &huge, 4);  // token 0's length
  write(dir_ / "absurd.bin", absurd);
  expect_error([&] { write_llama2c_tokenizer(dir_ / "absurd.bin", out, 512, 512); }, ErrorKind::kInvalidArgument,
               {"absurd.bin", "token 0 has length 1073741824"});

  std::string no_bytes = good;
  no_bytes.replace(no_bytes.find("<0x41>"), 6, "<0x4G>");
  write(dir_ / "nobytes.bin", no_bytes);
  expect_error([&] { write_llama2c_tokenizer(dir_ / "nobytes.bin", out, 512, 512); }, ErrorKind::kInvalidArgument,
               {"token 68", "<0x41>"});
  EXPECT_FALSE(fs::exists(out / "tokenizer.json"));
}

}  // namespace
}  // namespace tessera::text
