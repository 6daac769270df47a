// The tokenizer.json components on small hand-written tokenizers, where the
// expected ids can be worked out by hand (the cases HF's tokenizers library
// gives, checked against it when this test was written), and the built-in
// demo tokenizer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "text/bpe_tokenizer.h"
#include "text/demo_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera::text {
namespace {

using Ids = std::vector<int32_t>;

// <unk> <s> </s> ▁ a b c ab ▁ab abc; merges: a+b, ▁+ab, ab+c.
nlohmann::json small_tokenizer() {
  return nlohmann::json::parse(R"({
    "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true, "normalized": false},
      {"id": 1, "content": "<s>", "special": true, "normalized": false},
      {"id": 2, "content": "</s>", "special": true, "normalized": false}
    ],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": false,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "a": 4, "b": 5, "c": 6,
                        "ab": 7, "\u2581ab": 8, "abc": 9},
              "merges": [["a", "b"], ["\u2581", "ab"], ["ab", "c"]]}
  })");
}

std::unique_ptr<BpeTokenizer> build(const nlohmann::json& json, const TokenizerConfig& config = {}) {
  return BpeTokenizer::from_json(json, config, "test tokenizer.json");
}

TEST(textBpeModelTest, LowestRankMergesFirst) {
  const auto tokenizer = build(small_tokenizer());
  EXPECT_EQ(tokenizer->encode("abc", true), (Ids{9}));
  // ▁+ab (rank 1) wins over ab+c (rank 2); ▁ab+c is no merge.
  EXPECT_EQ(tokenizer->encode("\u2581abc", true), (Ids{8, 6}));
  EXPECT_EQ(tokenizer->encode("ababc", true), (Ids{7, 9}));
}

TEST(textBpeModelTest, UnknownCharacters) {
  nlohmann::json json = small_tokenizer();
  EXPECT_EQ(build(json)->encode("axyb", false), (Ids{4, 0, 5}));  // fused
  json["model"]["fuse_unk"] = false;
  EXPECT_EQ(build(json)->encode("axyb", false), (Ids{4, 0, 0, 5}));
  json["model"].erase("unk_token");
  EXPECT_EQ(build(json)->encode("axyb", false), (Ids{7}));  // dropped, as HF does, so a+b merge
}

TEST(textBpeModelTest, IgnoreMergesTakesWholeWords) {
  nlohmann::json json = small_tokenizer();
  json["model"]["merges"] = {"a b"};
  EXPECT_EQ(build(json)->encode("abc", false), (Ids{7, 6}));
  json["model"]["ignore_merges"] = true;
  EXPECT_EQ(build(json)->encode("abc", false), (Ids{9}));
}

TEST(textDecoderTest, NoDecoderJoinsPiecesWithSpaces) {
  const auto tokenizer = build(small_tokenizer());
  EXPECT_EQ(tokenizer->decode({1, 7, 6}, false), "<s> ab c");
  EXPECT_EQ(tokenizer->decode({1, 7, 6}, true), "ab c");
}

TEST(textAddedTokensTest, StripAndSingleWord) {
  nlohmann::json json = small_tokenizer();
  json["added_tokens"].push_back(
      {{"id", 10}, {"content", "[X]"}, {"special", false}, {"normalized", false}, {"lstrip", true}, {"rstrip", true}});
  json["added_tokens"].push_back({{"id", 11}, {"content", "cc"}, {"special", false}, {"single_word", true}});
  const auto tokenizer = build(json);
  EXPECT_EQ(tokenizer->encode("ab  [X] c", false), (Ids{7, 10, 6}));
  EXPECT_EQ(tokenizer->encode("a cc b", false), (Ids{4, 0, 11, 0, 5}));
  EXPECT_EQ(tokenizer->encode("acc", false), (Ids{4, 6, 6}));  // inside a word: no match
  EXPECT_EQ(tokenizer->vocab_size(), 12);
  EXPECT_FALSE(tokenizer->is_special(10));
  EXPECT_EQ(tokenizer->decode({10, 1}, true), "[X]");
}

TEST(textPostProcessorTest, TemplateAndConfigOverrides) {
  nlohmann::json json = small_tokenizer();
  json["post_processor"] = nlohmann::json::parse(R"({
    "type": "TemplateProcessing",
    "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "special_tokens": {"</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}})");
  EXPECT_EQ(build(json)->encode("ab", true), (Ids{7, 2}));
  EXPECT_EQ(build(json)->encode("ab", false), (Ids{7}));

  TokenizerConfig config;
  config.bos_token = "<s>";
  config.eos_token = "</s>";
  config.add_bos_token = true;
  config.add_eos_token = false;
  const auto overridden = build(json, config);
  EXPECT_EQ(overridden->encode("ab", true), (Ids{1, 7}));
  EXPECT_EQ(overridden->bos_id(), 1);
  EXPECT_EQ(overridden->eos_id(), 2);
  config.add_bos_token.reset();  // the template's prefix (none) stays
  EXPECT_EQ(build(json, config)->encode("ab", true), (Ids{7}));
  EXPECT_EQ(build(small_tokenizer())->bos_id(), std::nullopt);
}

TEST(textMetaspaceTest, SplitsWordsAndDecodes) {
  nlohmann::json json = small_tokenizer();
  json["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  json["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  const auto tokenizer = build(json);
  // Split before every ▁, so ▁ab never merges with what follows it.
  EXPECT_EQ(tokenizer->encode("abc ab", false), (Ids{8, 6, 8}));
  EXPECT_EQ(tokenizer->encode("a  b", false), (Ids{3, 4, 3, 3, 5}));
  EXPECT_EQ(tokenizer->decode({8, 6, 8}, false), "abc ab");
  // HF's Metaspace decoder drops every ▁ of the first token, not just a leading one.
  EXPECT_EQ(tokenizer->decode({3, 3, 5}, false), " b");
}

class textDemoTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera_demo_tokenizer_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static std::string read(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::filesystem::path dir_;
};

TEST_F(textDemoTokenizerTest, DeterministicAndUsable) {
  write_demo_tokenizer(dir_ / "a");
  write_demo_tokenizer(dir_ / "b");
  EXPECT_EQ(read(dir_ / "a/tokenizer.json"), read(dir_ / "b/tokenizer.json"));
  EXPECT_EQ(read(dir_ / "a/tokenizer_config.json"), read(dir_ / "b/tokenizer_config.json"));

  const auto tokenizer = load_tokenizer(dir_ / "a");
  EXPECT_EQ(tokenizer->vocab_size(), kDemoVocabSize);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  const std::string story = "Once upon a time there was a little girl named Lily. She liked the moon.";
  const Ids ids = tokenizer->encode(story, true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_LT(ids.size(), story.size() / 2);  // learned merges, not characters
  EXPECT_EQ(tokenizer->decode(ids, true), story);
  for (const std::string text : {"Zebra #42 {x}", "\u8bb2 caf\u00e9", "  spaced\n"})
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, true), true), text);
}

}  // namespace
}  // namespace tessera::text
