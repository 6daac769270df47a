// SentencePieceTokenizer on the real InternLM2 and Llama 2 tokenizer.model
// files. Exact ids against PyPI's sentencepiece are checked in
// tests/python/test_tokenizer_sentencepiece.py; here: how a directory is
// loaded, the added-token overlay, the config switches and round trips.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "../test_paths.h"
#include "core/error.h"
#include "text/demo_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

constexpr const char* kInternlm2 = "tokenizers/internlm2/tokenizer.model";
constexpr const char* kLlama2 = "tokenizers/llama2/tokenizer.model";

constexpr const char* kInternlm2Config = R"({
  "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": true,
  "added_tokens_decoder": {
    "0": {"content": "<unk>", "special": true}, "1": {"content": "<s>", "special": true},
    "2": {"content": "</s>", "special": true},
    "92542": {"content": "<|im_end|>", "special": true, "normalized": false},
    "92543": {"content": "<|im_start|>", "special": true, "normalized": false}}})";

class textSentencePieceTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_sp_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A model directory holding `model` and, when given, a tokenizer_config.json.
  fs::path model_dir(const std::string& name, const char* model, const std::string& config = {}) {
    const fs::path dir = dir_ / name;
    fs::create_directories(dir);
    fs::copy_file(testing::testdata_dir() / model, dir / "tokenizer.model");
    if (!config.empty()) std::ofstream(dir / "tokenizer_config.json") << config;
    return dir;
  }

  fs::path dir_;
};

TEST_F(textSentencePieceTokenizerTest, InternLM2ChatTokensComeFromTheConfig) {
  TESSERA_REQUIRE_TESTDATA(kInternlm2);
  const auto tokenizer = load_tokenizer(model_dir("internlm2", kInternlm2, kInternlm2Config));
  EXPECT_EQ(tokenizer->vocab_size(), 92544);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_EQ(tokenizer->id_to_piece(92543), "<|im_start|>");  // "[UNUSED_TOKEN_146]" in the model
  EXPECT_EQ(tokenizer->piece_to_id("<|im_end|>"), 92542);
  EXPECT_TRUE(tokenizer->is_special(92543));
  EXPECT_FALSE(tokenizer->is_special(1008));

  const std::vector<int32_t> ids = tokenizer->encode("<|im_start|>user\nHi<|im_end|>", true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 92543);
  EXPECT_EQ(ids.back(), 92542);
  EXPECT_EQ(tokenizer->decode(ids, true), "user\nHi");
  EXPECT_EQ(tokenizer->decode(ids, false), "<s><|im_start|>user\nHi<|im_end|>");
  // The model adds no dummy prefix, so decoding keeps a leading space.
  EXPECT_EQ(tokenizer->decode(tokenizer->encode(" x", false), true), " x");
}

TEST_F(textSentencePieceTokenizerTest, WithoutConfigTheModelsControlPiecesAreSpecial) {
  TESSERA_REQUIRE_TESTDATA(kLlama2);
  const auto tokenizer = load_tokenizer(model_dir("llama2", kLlama2));
  EXPECT_EQ(tokenizer->vocab_size(), 32000);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_TRUE(tokenizer->is_special(0) && tokenizer->is_special(1) && tokenizer->is_special(2));
  EXPECT_EQ(tokenizer->piece_to_id("\u2581Hello"), 15043);
  EXPECT_EQ(tokenizer->piece_to_id("no such piece"), std::nullopt);
  EXPECT_EQ(tokenizer->encode("Hello", true), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tokenizer->encode("Hello", false), (std::vector<int32_t>{15043}));
  EXPECT_EQ(tokenizer->encode("", true), (std::vector<int32_t>{1}));
  // "<s>" in the text is the BOS token, and the span after it gets its own dummy prefix.
  EXPECT_EQ(tokenizer->encode("<s>Hello", false), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tokenizer->decode({1, 15043, 2}, false), "<s> Hello</s>");  // LlamaTokenizerFast's spacing
  EXPECT_EQ(tokenizer->decode({1, 15043, 2}, true), "Hello");
  EXPECT_EQ(tokenizer->decode({3 + 0xE8, 3 + 0xAE}, true), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer->decode({3 + 0xE8, 3 + 0xAE, 3 + 0xB2}, true), "\xE8\xAE\xB2");
  EXPECT_EQ(tokenizer->decode({-1, 15043, 99999}, true), "Hello");
  EXPECT_THROW(tokenizer->id_to_piece(32000), Error);
  EXPECT_THROW(tokenizer->encode("\xFF", true), Error);

  for (const std::string text : {"Hello world", "  two  spaces ", "\xE8\xAE\xB2\xE6\x95\x85\xE4\xBA\x8B \xF0\x9F\x98\x80",
                                 "line\n\ttab", "x"}) {
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, true), true), text);
  }
}

TEST_F(textSentencePieceTokenizerTest, ConfigSwitches) {
  TESSERA_REQUIRE_TESTDATA(kLlama2);
  const auto both = load_tokenizer(model_dir("both", kLlama2, R"({"add_bos_token": false, "add_eos_token": true})"));
  EXPECT_EQ(both->encode("Hello", true), (std::vector<int32_t>{15043, 2}));

  // legacy: false gives only the start of the text the dummy prefix, as LlamaTokenizer does.
  const auto legacy = load_tokenizer(model_dir("legacy", kLlama2));
  const auto modern = load_tokenizer(model_dir("modern", kLlama2, R"({"legacy": false})"));
  const std::vector<int32_t> legacy_ids = legacy->encode("Hi<s>Hello", false);
  const std::vector<int32_t> modern_ids = modern->encode("Hi<s>Hello", false);
  EXPECT_EQ(legacy_ids.back(), 15043);  // "▁Hello"
  ASSERT_EQ(modern_ids.size(), 3u);
  EXPECT_EQ(modern->id_to_piece(modern_ids[2]), "Hello");
  EXPECT_EQ(modern->encode("Hi", false), legacy->encode("Hi", false));
  EXPECT_EQ(modern->encode("<s> Hello", false), (std::vector<int32_t>{1, 15043}));

  EXPECT_THROW(load_tokenizer(model_dir("bad_bos", kLlama2, R"({"bos_token": "<nope>"})")), Error);
}

TEST_F(textSentencePieceTokenizerTest, TokenizerJsonWinsOverTokenizerModel) {
  TESSERA_REQUIRE_TESTDATA(kLlama2);
  const fs::path dir = model_dir("both_files", kLlama2);
  write_demo_tokenizer(dir);  // writes tokenizer.json (and its config) beside tokenizer.model
  const auto tokenizer = load_tokenizer(dir);
  EXPECT_LT(tokenizer->vocab_size(), 32000);
}

}  // namespace
}  // namespace tessera::text
