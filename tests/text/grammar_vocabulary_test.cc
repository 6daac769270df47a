// GrammarVocabulary: the bytes of each token (their concatenation is what
// the tokenizer decodes), and the tokens a matcher takes next, found by the
// sorted walk and the plain-string mask, against asking the matcher about
// every token one by one.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../test_paths.h"
#include "hex_text.h"
#include "real_tokenizers.h"
#include "text/demo_tokenizer.h"
#include "text/grammar_vocabulary.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct Case {
  std::string name;
  std::shared_ptr<Tokenizer> tokenizer;
  std::shared_ptr<GrammarVocabulary> vocabulary;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> result;
    const auto add = [&](const std::string& name, const std::optional<fs::path>& dir) {
      if (!dir) return;
      std::shared_ptr<Tokenizer> tokenizer = load_tokenizer(*dir);
      result.push_back({name, tokenizer, std::make_shared<GrammarVocabulary>(*tokenizer)});
    };
    const fs::path demo = testing::real_tokenizer_root() / "grammar_demo";
    write_demo_tokenizer(demo);
    add("demo", demo);
    add("internlm2", testing::internlm2_dir());
    add("llama2", testing::llama2_dir());
    add("qwen2", testing::qwen2_dir());
    return result;
  }();
  return all;
}

TEST(GrammarVocabulary, TokensBytesJoinToTheDecodedText) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const GrammarVocabulary& v = *c.vocabulary;
    std::vector<int32_t> usable;
    for (int32_t id = 0; id < v.size(); ++id) {
      if (!v.bytes(id).empty()) usable.push_back(id);
    }
    ASSERT_GT(usable.size(), static_cast<size_t>(v.size()) * 9 / 10);
    int compared = 0;
    for (int trial = 0; trial < 1000; ++trial) {
      // After a leading "a" (so no tokenizer's first-token rule applies), a
      // run of tokens whose bytes are valid UTF-8 (what a structured output
      // lets through) decodes to those bytes.
      const int32_t anchor = *c.tokenizer->piece_to_id("a");
      std::vector<int32_t> ids{anchor};
      std::string bytes;
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < n; ++i) {
        const int32_t id = usable[rng() % usable.size()];
        ids.push_back(id);
        bytes += v.bytes(id);
      }
      if (!is_valid_utf8(bytes)) continue;
      ++compared;
      EXPECT_EQ(c.tokenizer->decode(ids, false), c.tokenizer->decode({anchor}, false) + bytes);
    }
    EXPECT_GT(compared, 300);
  }
}

TEST(GrammarVocabulary, FindsTheTokensTheMatcherTakes) {
  std::ifstream in(testing::fixtures_dir() / "json_grammar_cases.json");
  const Json fixture = Json::parse(in);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const GrammarVocabulary& v = *c.vocabulary;
    // Every state along the documents for the demo; for the large
    // vocabularies a sample, with more of the states inside strings.
    const size_t stride = v.size() > 1000 ? 9 : 1;
    int states = 0, plain_states = 0, pattern_states = 0;
    for (const Json& schema_case : fixture["cases"]) {
      const JsonGrammar grammar =
          schema_case["schema"].is_null() ? any_json_object() : compile_json_schema(schema_case["schema"]);
      const std::string text = testing::from_hex(schema_case["documents"][0]["hex"].get<std::string>());
      JsonMatcher matcher(grammar);
      PatternMaskCache cache;
      for (size_t at = 0; at <= text.size(); ++at) {
        if (at % stride == 0 || at == text.size() || matcher.in_plain_string()) {
          std::vector<uint64_t> fast((static_cast<size_t>(v.size()) + 63) / 64, 0);
          v.allowed(matcher, fast);
          // A pattern state's mask from the cache, the second time, is the same.
          for (int pass = 0; pass < 2; ++pass) {
            std::vector<uint64_t> cached(fast.size(), 0);
            v.allowed(matcher, cached, &cache);
            EXPECT_EQ(cached, fast) << schema_case["name"] << " after " << at << " bytes, pass " << pass;
          }
          int mismatches = 0;
          for (int32_t id = 0; id < v.size(); ++id) {
            JsonMatcher one = matcher;
            const bool takes = !v.bytes(id).empty() && one.advance(v.bytes(id));
            const bool found = (fast[id / 64] >> (id % 64) & 1) != 0;
            if (takes != found && mismatches++ < 3) {
              ADD_FAILURE() << schema_case["name"] << " after " << at << " bytes, token " << id << " '" << v.bytes(id)
                            << "': the matcher " << (takes ? "takes" : "refuses") << " it";
            }
          }
          ++states;
          plain_states += matcher.in_plain_string() ? 1 : 0;
          bool any_plain = false;
          std::vector<JsonMatcher::PatternState> patterns;
          pattern_states += matcher.in_string(any_plain, patterns) && !patterns.empty() ? 1 : 0;
        }
        if (at < text.size()) {
          ASSERT_TRUE(matcher.advance(static_cast<uint8_t>(text[at])));
        }
      }
    }
    EXPECT_GT(states, 60);
    EXPECT_GT(plain_states, 5);  // the plain-string mask was among what is compared
    EXPECT_GT(pattern_states, 5);  // and the patterns' automata
  }
}

TEST(JsonTokenMatcher, TakesOnlyTokensThatFit) {
  const Case& demo = cases().front();
  auto grammar = std::make_shared<const JsonGrammar>(
      compile_json_schema(Json::parse(R"({"type": "object", "properties": {"ok": {"type": "boolean"}},
                                          "required": ["ok"]})")));
  JsonTokenMatcher m(grammar, demo.vocabulary);
  const auto id_of = [&](const std::string& bytes) {
    for (int32_t id = 0; id < demo.vocabulary->size(); ++id) {
      if (demo.vocabulary->bytes(id) == bytes) return id;
    }
    return -1;
  };
  EXPECT_FALSE(m.accept(id_of("a")));
  EXPECT_FALSE(m.accept(-1));
  EXPECT_FALSE(m.accept(demo.vocabulary->size()));
  for (const char* piece : {"{", "\"", "o", "k", "\"", ":", "t", "r", "u", "e"}) ASSERT_TRUE(m.accept(id_of(piece)));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept(id_of("}")));
  EXPECT_TRUE(m.done());
}

TEST(JsonTokenMatcher, OffersAndTakesTheSpecialTokensAGrammarWrites) {
  const Case& demo = cases().front();
  JsonGrammarBuilder builder;
  const int32_t root = builder.sequence({builder.raw("<|call|>"), JsonGrammar::kAnyObject});
  auto grammar = std::make_shared<const JsonGrammar>(builder.finish(root));
  const int32_t marker = demo.vocabulary->size();  // an id past the vocabulary's, as a special token's may be
  JsonTokenMatcher m(grammar, demo.vocabulary, {{marker, "<|call|>"}});
  std::vector<uint64_t> bits((static_cast<size_t>(marker) + 64) / 64, 0);
  m.allowed(bits);
  EXPECT_TRUE(bits[marker / 64] >> (marker % 64) & 1);
  ASSERT_TRUE(m.accept(marker));
  std::fill(bits.begin(), bits.end(), 0);
  m.allowed(bits);
  EXPECT_FALSE(bits[marker / 64] >> (marker % 64) & 1);  // once is all the grammar writes it
  EXPECT_FALSE(m.accept(marker));
}

}  // namespace
}  // namespace tessera::text
