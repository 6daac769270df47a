// tessera's real tokenizers against the golden ids of the reference libraries
// (tests/fixtures/tokenizers, written by tools/make_tokenizer_golden.py from
// PyPI sentencepiece and tokenizers): encode ids, the reference's decode,
// round trips, and streaming detokenization one id at a time equal to full
// decoding, on every corpus text and on the ~100 KB input.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "real_tokenizers.h"
#include "text/incremental_detokenizer.h"
#include "text/tokenizer.h"
#include "tokenizer_corpus.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

struct RealTokenizer {
  const char* name;
  const char* testdata;  // the file whose absence skips the tests
  std::function<std::optional<fs::path>()> dir;
};

void PrintTo(const RealTokenizer& tokenizer, std::ostream* out) { *out << tokenizer.name; }

const RealTokenizer kTokenizers[] = {
    {"internlm2", "tokenizers/internlm2/tokenizer.model", testing::internlm2_dir},
    {"llama2", "tokenizers/llama2/tokenizer.model", testing::llama2_dir},
    {"qwen2", "tokenizers/qwen2/vocab.json", testing::qwen2_dir},
};

std::string streamed(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDetokenizer stream(tokenizer, skip_special);
  std::string text;
  for (const int32_t id : ids) text += stream.push(id);
  return text + stream.finish();
}

std::string describe(const std::vector<int32_t>& ids) {
  std::ostringstream out;
  for (size_t i = 0; i < ids.size() && i < 64; ++i) out << (i ? " " : "") << ids[i];
  if (ids.size() > 64) out << " ... (" << ids.size() << " ids)";
  return out.str();
}

class textTokenizerGolden : public ::testing::TestWithParam<RealTokenizer> {
 protected:
  void SetUp() override {
    if (!fs::exists(testing::testdata_dir() / GetParam().testdata)) {
      GTEST_SKIP() << "test data " << GetParam().testdata << " not found under " << testing::testdata_dir()
                   << " (set TESSERA_TESTDATA)";
    }
    const auto dir = GetParam().dir();
    ASSERT_TRUE(dir.has_value());
    tokenizer_ = load_tokenizer(*dir);
    golden_ = testing::read_json_file(testing::tokenizer_fixtures_dir() / (std::string(GetParam().name) + ".json"));
    corpus_ = testing::read_corpus();
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  nlohmann::json golden_;
  std::vector<testing::CorpusText> corpus_;
};

TEST_P(textTokenizerGolden, CorpusIdsDecodesAndStreamsMatchTheReference) {
  const auto& cases = golden_.at("cases");
  ASSERT_EQ(cases.size(), corpus_.size()) << "corpus.json and the golden file disagree; rerun the script";
  for (size_t i = 0; i < corpus_.size(); ++i) {
    const std::string& text = corpus_[i].text;
    SCOPED_TRACE(corpus_[i].name);
    ASSERT_EQ(cases[i].at("name").get<std::string>(), corpus_[i].name);
    const auto expected = cases[i].at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tokenizer_->encode(text, golden_.at("add_special").get<bool>());
    EXPECT_EQ(ids, expected) << "ours:      " << describe(ids) << "\nreference: " << describe(expected);

    // Decoding the reference's ids gives the reference's text; where that is
    // the input itself (text without special tokens or normalization), the
    // round trip is exact.
    const std::string decoded = tokenizer_->decode(expected, true);
    EXPECT_EQ(decoded, cases[i].at("decoded").get<std::string>());
    if (cases[i].at("decoded").get<std::string>() == text) EXPECT_EQ(tokenizer_->decode(ids, true), text);

    for (const bool skip : {true, false}) {
      EXPECT_EQ(streamed(*tokenizer_, expected, skip), tokenizer_->decode(expected, skip)) << "skip_special " << skip;
    }
  }
}

TEST_P(textTokenizerGolden, LargeInputMatchesTheReference) {
  const auto& large = golden_.at("large");
  const std::string text = testing::large_corpus_text(corpus_);
  ASSERT_EQ(text.size(), large.at("bytes").get<size_t>());
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(testing::fnv1a64(text)));
  ASSERT_EQ(hash, large.at("fnv1a64").get<std::string>()) << "the large input is not the one the script built";

  const std::vector<int32_t> expected =
      testing::leb128_ids(testing::base64_decode(large.at("ids_leb128_base64").get<std::string>()));
  ASSERT_EQ(expected.size(), large.at("count").get<size_t>());
  const std::vector<int32_t> ids = tokenizer_->encode(text, true);
  ASSERT_EQ(ids.size(), expected.size());
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], expected[i]) << "first difference at id " << i;

  const std::string decoded = tokenizer_->decode(ids, true);
  if (large.at("decoded_equals_text").get<bool>()) EXPECT_EQ(decoded, text);
  EXPECT_EQ(streamed(*tokenizer_, ids, true), decoded);
}

INSTANTIATE_TEST_SUITE_P(Real, textTokenizerGolden, ::testing::ValuesIn(kTokenizers),
                         [](const auto& info) { return std::string(info.param.name); });

// The readers of the golden files' compact form, on known values, so a reader
// that returns nothing cannot pass the comparisons above vacuously.
TEST(textTokenizerGoldenFormat, ReadersDecodeKnownValues) {
  // 1, 300, 151645 as LEB128: 01 | ac 02 | dd a0 09
  EXPECT_EQ(testing::leb128_ids(testing::base64_decode("AawC3aAJ")), (std::vector<int32_t>{1, 300, 151645}));
  EXPECT_THROW(testing::leb128_ids(std::string("\x80", 1)), std::runtime_error);
  EXPECT_EQ(testing::fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(testing::fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  const std::vector<testing::CorpusText> corpus = {{"a", "ab"}, {"b", "\xe8\xae\xb2"}};
  const std::string text = testing::large_corpus_text(corpus, 1000, 1);
  EXPECT_GE(text.size(), 1000u);
  EXPECT_LT(text.size(), 1000u + 5);
  EXPECT_EQ(text, testing::large_corpus_text(corpus, 1000, 1));
  EXPECT_NE(text, testing::large_corpus_text(corpus, 1000, 2));
}

}  // namespace
}  // namespace tessera::text
