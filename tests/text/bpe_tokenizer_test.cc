// BpeTokenizer on stories260K's llama2.c tokenizer (tok512.bin), converted to
// tokenizer.json. The reference is llama2.c's own encode (run.c), rewritten
// here from its description: score-greedy merging over code points with byte
// fallback, a dummy-prefix " " token, BOS first. HF's tokenizers library is
// the second reference, in tests/python/test_tokenizer_reference.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "../test_paths.h"
#include "core/error.h"
#include "text/bpe_tokenizer.h"
#include "text/json_field.h"
#include "text/llama2c_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera::text {
namespace {

constexpr const char* kTok512 = "models/stories260K/tok512.bin";
constexpr int32_t kTok512VocabSize = 512;  // from stories260K's checkpoint header

// llama2.c's tokenizer as run.c holds it: pieces with real spaces, scores.
class Llama2cReference {
 public:
  explicit Llama2cReference(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    size_t pos = 4;  // max_token_length
    for (int32_t id = 0; id < kTok512VocabSize; ++id) {
      float score;
      int32_t length;
      std::memcpy(&score, bytes.data() + pos, 4);
      std::memcpy(&length, bytes.data() + pos + 4, 4);
      pieces_.push_back(bytes.substr(pos + 8, length));
      scores_.push_back(score);
      ids_.emplace(pieces_.back(), id);
      pos += 8 + length;
    }
  }

  std::vector<int32_t> encode(const std::string& text, bool bos) const {
    std::vector<int32_t> tokens;
    if (bos) tokens.push_back(1);
    if (!text.empty()) tokens.push_back(ids_.at(" "));  // the dummy prefix
    std::string character;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto byte = static_cast<unsigned char>(text[i]);
      if ((byte & 0xC0) != 0x80) character.clear();
      character += text[i];
      const bool continues = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
      if (continues && character.size() < 4) continue;
      if (const auto it = ids_.find(character); it != ids_.end()) {
        tokens.push_back(it->second);
      } else {
        for (const char c : character) tokens.push_back(static_cast<unsigned char>(c) + 3);
      }
      character.clear();
    }
    while (true) {  // merge the best-scoring adjacent pair, leftmost on ties
      float best_score = -1e10f;
      int best_id = -1;
      size_t best_index = 0;
      for (size_t i = 0; i + 1 < tokens.size(); ++i) {
        const auto it = ids_.find(pieces_[tokens[i]] + pieces_[tokens[i + 1]]);
        if (it != ids_.end() && scores_[it->second] > best_score) {
          best_score = scores_[it->second];
          best_id = it->second;
          best_index = i;
        }
      }
      if (best_id < 0) break;
      tokens[best_index] = best_id;
      tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_index) + 1);
    }
    return tokens;
  }

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::map<std::string, int32_t> ids_;
};

const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = {
      "Hello world",
      "Once upon a time, there was a little girl named Lily.",
      "She liked to play with her ball in the park. The sun was shining!",
      "\"Can I have it?\" asked Tom. 'No,' said Mom; she smiled :-)",
      "The year 2024 had 366 days, and 3.14159 is pi.",
      "\u8bb2",                                    // 讲: three byte pieces
      "\u8bb2\u6545\u4e8b\u7ed9\u6211\u542c",      // 讲故事给我听
      "caf\u00e9 na\u00efve r\u00e9sum\u00e9",     // é, ï: not in the vocabulary
      "emoji \xF0\x9F\x98\x80 and \xF0\x9F\x90\xB6",  // 😀 🐶: four bytes each
      "  two leading spaces",
      "trailing spaces   ",
      "many     inner   spaces",
      "line one\nline two\n\nline four",
      "tabs\tand\r\nwindows newlines",
      " ",
      "x",
      "The end.",
  };
  return texts;
}

class textTok512Test : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_TESTDATA(kTok512);
    dir_ = std::filesystem::temp_directory_path() / ("tessera_bpe_test_" + std::to_string(::getpid()));
    write_llama2c_tokenizer(tok512(), dir_, kTok512VocabSize, 512);
    tokenizer_ = load_tokenizer(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  static std::filesystem::path tok512() { return testing::testdata_dir() / kTok512; }

  std::filesystem::path dir_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(textTok512Test, MatchesLlama2cEncode) {
  const Llama2cReference reference(tok512());
  for (const std::string& text : sample_texts()) {
    EXPECT_EQ(tokenizer_->encode(text, true), reference.encode(text, true)) << "text: " << text;
    EXPECT_EQ(tokenizer_->encode(text, false), reference.encode(text, false)) << "text: " << text;
  }
}

// The comparison above must be able to fail: merges in the wrong order give
// ids llama2.c would not.
TEST_F(textTok512Test, ReferenceCatchesWrongMergeOrder) {
  nlohmann::json json = read_json_file(dir_ / "tokenizer.json");
  auto& merges = json["model"]["merges"];
  std::reverse(merges.begin(), merges.end());
  const auto wrong = BpeTokenizer::from_json(json, TokenizerConfig{}, "reversed merges");
  const Llama2cReference reference(tok512());
  int mismatches = 0;
  for (const std::string& text : sample_texts()) mismatches += wrong->encode(text, false) != reference.encode(text, false);
  EXPECT_GT(mismatches, 0);
}

TEST_F(textTok512Test, ByteFallbackForCharactersOutsideTheVocabulary) {
  const std::vector<int32_t> ids = tokenizer_->encode("\u8bb2", false);  // 讲 = E8 AE B2
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(tokenizer_->id_to_piece(ids[0]), "\u2581");
  EXPECT_EQ(tokenizer_->id_to_piece(ids[1]), "<0xE8>");
  EXPECT_EQ(tokenizer_->id_to_piece(ids[2]), "<0xAE>");
  EXPECT_EQ(tokenizer_->id_to_piece(ids[3]), "<0xB2>");
  EXPECT_EQ(ids[1], 0xE8 + 3);
  EXPECT_EQ(tokenizer_->decode(ids, true), "\u8bb2");
  // An incomplete character decodes to one U+FFFD per byte, as HF's ByteFallback does.
  EXPECT_EQ(tokenizer_->decode({ids[1], ids[2]}, true), "\uFFFD\uFFFD");
}

TEST_F(textTok512Test, DecodeInvertsEncode) {
  for (const std::string& text : sample_texts()) {
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text, true), true), text) << "text: " << text;
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text, false), true), text) << "text: " << text;
  }
}

TEST_F(textTok512Test, SpecialTokens) {
  EXPECT_EQ(tokenizer_->vocab_size(), 512);
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);
  EXPECT_EQ(tokenizer_->id_to_piece(0), "<unk>");
  EXPECT_EQ(tokenizer_->id_to_piece(1), "<s>");
  EXPECT_EQ(tokenizer_->id_to_piece(2), "</s>");
  EXPECT_EQ(tokenizer_->piece_to_id("</s>"), 2);
  EXPECT_EQ(tokenizer_->piece_to_id("no such piece"), std::nullopt);
  EXPECT_TRUE(tokenizer_->is_special(1));
  EXPECT_FALSE(tokenizer_->is_special(300));
  EXPECT_THROW(tokenizer_->id_to_piece(512), Error);
  EXPECT_THROW(tokenizer_->id_to_piece(-1), Error);

  EXPECT_EQ(tokenizer_->encode("", true), std::vector<int32_t>{1});
  EXPECT_TRUE(tokenizer_->encode("", false).empty());
  // Special tokens in the text become their ids; the text around them is
  // normalized on its own (each piece gets the "▁" prefix, as HF does).
  const std::vector<int32_t> ids = tokenizer_->encode("Hi</s><s>Hi", false);
  const std::vector<int32_t> hi = tokenizer_->encode("Hi", false);
  std::vector<int32_t> expected = hi;
  expected.push_back(2);
  expected.push_back(1);
  expected.insert(expected.end(), hi.begin(), hi.end());
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tokenizer_->decode(ids, true), "Hi Hi");
  EXPECT_EQ(tokenizer_->decode(ids, false), "Hi</s><s> Hi");
  // Ids without a piece are skipped, as HF does.
  EXPECT_EQ(tokenizer_->decode({hi[0], 9999, -5}, true), tokenizer_->decode({hi[0]}, true));
}

TEST_F(textTok512Test, RejectsInvalidUtf8) {
  try {
    tokenizer_->encode("ok \xC3(", true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("UTF-8"), std::string::npos) << e.message();
  }
}

// transformers' LlamaConverter with legacy = false writes the same tokenizer as
// a Metaspace pre-tokenizer (prepend_scheme "first") and no normalizer.
TEST_F(textTok512Test, MetaspaceFormMatchesPrependForm) {
  nlohmann::json json = read_json_file(dir_ / "tokenizer.json");
  json["normalizer"] = nullptr;
  json["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  const auto metaspace = BpeTokenizer::from_json(json, TokenizerConfig{}, "metaspace form");
  for (const std::string& text : sample_texts()) {
    if (text.starts_with(" ")) continue;  // Metaspace does not prepend to text that starts with a space
    EXPECT_EQ(metaspace->encode(text, false), tokenizer_->encode(text, false)) << "text: " << text;
  }
  // After a special token the text is no longer "first": no "▁" is prepended.
  const std::vector<int32_t> ids = metaspace->encode("<s>Hi", false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_NE(metaspace->id_to_piece(ids[1]).rfind("\u2581", 0), 0u);
}

}  // namespace
}  // namespace tessera::text
