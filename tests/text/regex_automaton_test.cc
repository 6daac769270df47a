// RegexAutomaton against Python's regex engines:
// tests/fixtures/regex_cases.json (tools/make_regex_cases.py) holds, for each
// pattern, strings with whether re matches them and how many of their leading
// characters the regex package's partial matching calls extendable to a
// match. The automaton must take exactly that many characters (byte by
// byte), die within the next one, and accept exactly the matching strings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "../test_paths.h"
#include "hex_text.h"
#include "core/error.h"
#include "text/regex_automaton.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

using Json = nlohmann::ordered_json;

using testing::from_hex;

// The state after `bytes`, or kDead.
int32_t run(const RegexAutomaton& automaton, std::string_view bytes) {
  int32_t state = automaton.start();
  for (char c : bytes) {
    state = automaton.next(state, static_cast<uint8_t>(c));
    if (state == RegexAutomaton::kDead) break;
  }
  return state;
}

bool matches(const RegexAutomaton& automaton, std::string_view bytes) {
  const int32_t state = run(automaton, bytes);
  return state != RegexAutomaton::kDead && automaton.accepting(state);
}

// Byte offset of the end of the first `n` code points of valid UTF-8 `text`.
size_t prefix_bytes(std::string_view text, size_t n) {
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) pos += utf8_sequence_length(text, pos);
  return pos;
}

RegexOptions options_of(const Json& c) {
  RegexOptions options;
  options.dialect = c["dialect"] == "python" ? RegexDialect::kPython : RegexDialect::kEcmaScript;
  options.search = c["search"].get<bool>();
  return options;
}

TEST(RegexAutomaton, AgreesWithPythonsRegexEngines) {
  std::ifstream in(testing::fixtures_dir() / "regex_cases.json");
  ASSERT_TRUE(in.good()) << "run tools/make_regex_cases.py";
  const Json cases = Json::parse(in)["cases"];
  ASSERT_GE(cases.size(), 20u);
  int matching = 0, dying = 0;
  for (const Json& c : cases) {
    const std::string pattern = c["pattern"];
    SCOPED_TRACE(pattern);
    const auto automaton = RegexAutomaton::compile(pattern, options_of(c));
    for (const Json& s : c["strings"]) {
      const std::string text = from_hex(s["hex"].get<std::string>());
      SCOPED_TRACE(text);
      const bool match = s["match"].get<bool>();
      matching += match ? 1 : 0;
      EXPECT_EQ(matches(*automaton, text), match);
      const auto viable = s["viable"].get<size_t>();
      const size_t alive_bytes = prefix_bytes(text, viable);
      EXPECT_NE(run(*automaton, text.substr(0, alive_bytes)), RegexAutomaton::kDead)
          << "a text that can still match was refused";
      if (alive_bytes < text.size()) {
        ++dying;
        const size_t next = alive_bytes + utf8_sequence_length(text, alive_bytes);
        EXPECT_EQ(run(*automaton, text.substr(0, next)), RegexAutomaton::kDead)
            << "a text that cannot match any more was taken";
      }
    }
  }
  EXPECT_GT(matching, 300);
  EXPECT_GT(dying, 300);
}

TEST(RegexAutomaton, DiesInsideACharacterWhenNoneOfItsCompletionsFits) {
  // Only Cyrillic letters: Ж (D0 96) fits; É (C3 89) dies at its lead byte,
  // and D4 (a lead byte of Armenian/Cyrillic Supplement) past U+04FF at it too.
  const auto automaton = RegexAutomaton::compile("^[\\u0400-\\u04FF]+$", {RegexDialect::kEcmaScript, true, false});
  EXPECT_NE(automaton->next(automaton->start(), 0xD0), RegexAutomaton::kDead);
  EXPECT_EQ(automaton->next(automaton->start(), 0xC3), RegexAutomaton::kDead);
  EXPECT_EQ(automaton->next(automaton->start(), 0xD4), RegexAutomaton::kDead);
  EXPECT_TRUE(matches(*automaton, "\xD0\x96"));
  EXPECT_FALSE(matches(*automaton, "\xD0"));  // half a character is no match
}

TEST(RegexAutomaton, InAJsonStringTakesOnlyWhatAStringCanCarry) {
  const RegexOptions json{RegexDialect::kEcmaScript, true, true};
  // \x01 has no short escape: a pattern that needs it matches nothing a string writes.
  try {
    RegexAutomaton::compile("^\\x01$", json);
    FAIL() << "a pattern of a control character was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no string matches"), std::string::npos) << e.what();
  }
  const auto any = RegexAutomaton::compile("^[^a]$", json);
  EXPECT_TRUE(matches(*any, "\n"));
  EXPECT_FALSE(matches(*any, std::string_view("\x01", 1)));
  EXPECT_FALSE(matches(*any, std::string_view("\0", 1)));
}

TEST(RegexAutomaton, RefusesWhatItCannotEnforceAndSaysWhere) {
  const RegexOptions ecma{RegexDialect::kEcmaScript, true, false};
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"(a)\\1", "backreferences"},
      {"a(?=b)", "lookaround"},
      {"\\bword", "word-boundary"},
      {"(?i)abc", "not supported"},
      {"\\p{L}", "Unicode property"},
      {"a{2,1}", "out of order"},
      {"a{5000}", "above 1000"},
      {"*a", "nothing to repeat"},
      {"a**", "repetition of a repetition"},
      {"(ab", "unterminated group"},
      {"ab)", "unbalanced"},
      {"[ab", "unterminated character class"},
      {"[z-a]", "out of order"},
      {"a^b", "start and end"},
      {"[^\\s\\S]", "no string matches"},
      {"\\q", "\\q"},
      {"(a|b)*a(a|b){20}", "too complex"},
      {"(?:\\w+\\s*){0,1000}", "takes too long"},  // few states, each a large closure
  };
  for (const auto& [pattern, message] : refused) {
    try {
      RegexAutomaton::compile(pattern, ecma);
      ADD_FAILURE() << "taken: " << pattern;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << pattern;
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << pattern << ": " << e.what();
    }
  }
}

TEST(RegexAutomaton, StaysSmallForLongRepetitions) {
  const auto automaton = RegexAutomaton::compile("[a-z]{1,1000}", {RegexDialect::kPython, false, false});
  EXPECT_LE(automaton->states(), 1002u);
  EXPECT_TRUE(matches(*automaton, std::string(1000, 'q')));
  EXPECT_FALSE(matches(*automaton, std::string(1001, 'q')));
}

TEST(RegexAutomaton, LengthBoundsCountCharactersNotBytes) {
  // 2 to 3 characters of a, é (two bytes) or 😀 (four).
  const auto base = RegexAutomaton::compile(R"(^[a\u00e9\ud83d\ude00]*$)", {RegexDialect::kEcmaScript, true, true});
  const auto bounded = base->with_length(2, 3);
  EXPECT_FALSE(matches(*bounded, "a"));
  EXPECT_TRUE(matches(*bounded, "a\xC3\xA9"));
  EXPECT_TRUE(matches(*bounded, "\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xC3\xA9"));
  EXPECT_FALSE(matches(*bounded, "aaaa"));
  EXPECT_EQ(run(*bounded, "aaaa"), RegexAutomaton::kDead);  // refused at the fourth, not at the end
  const auto at_least = base->with_length(3, -1);
  EXPECT_FALSE(matches(*at_least, "aa"));
  EXPECT_TRUE(matches(*at_least, std::string(50, 'a')));
  // `ab` has no match of 3 or more characters.
  EXPECT_THROW(RegexAutomaton::compile("^ab$", {RegexDialect::kEcmaScript, true, true})->with_length(3, -1), Error);
}

}  // namespace
}  // namespace tessera::text
