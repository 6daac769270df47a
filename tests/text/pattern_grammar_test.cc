// Patterns inside structured output: a string's pattern or format and
// guided_regex's whole text, byte by byte through JsonMatcher, and token by
// token through a real vocabulary, where no sequence of allowed tokens may
// reach a state with nothing allowed and no way to end.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "real_tokenizers.h"
#include "text/demo_tokenizer.h"
#include "text/grammar_vocabulary.h"
#include "text/json_grammar.h"
#include "text/json_matcher.h"

namespace tessera::text {
namespace {

using Json = nlohmann::ordered_json;

JsonGrammar schema(const char* text) { return compile_json_schema(Json::parse(text)); }

JsonGrammar guided_regex(const char* pattern) {
  JsonGrammarBuilder builder;
  const int32_t root = builder.regex(pattern);
  return builder.finish(root);
}

bool takes(JsonMatcher& m, std::string_view bytes) { return m.advance(bytes); }

TEST(PatternGrammar, AStringHoldsToItsPatternEscapesDecoded) {
  const JsonGrammar word = schema(R"({"type": "string", "pattern": "^[a-z]+$"})");
  JsonMatcher m(word);
  ASSERT_TRUE(m.advance('"'));
  EXPECT_FALSE(JsonMatcher(m).advance('"'));   // the empty string does not match
  EXPECT_FALSE(JsonMatcher(m).advance('\\'));  // no escaped character does either
  EXPECT_FALSE(JsonMatcher(m).advance('A'));
  ASSERT_TRUE(takes(m, "ab"));
  ASSERT_TRUE(m.advance('"'));
  EXPECT_TRUE(m.done());

  // A newline in the pattern is written as \n; raw it is a control byte, and
  // \u escapes are not written under a pattern.
  const JsonGrammar lines = schema(R"({"pattern": "^a\nb$"})");
  JsonMatcher l(lines);
  EXPECT_TRUE(JsonMatcher(l).advance(std::string_view("\"a\\nb\"")));
  EXPECT_FALSE(JsonMatcher(l).advance(std::string_view("\"a\nb\"")));
  EXPECT_FALSE(JsonMatcher(l).advance(std::string_view("\"a\\u000a")));
  // Quotes and backslashes in the pattern come from their escapes.
  const JsonGrammar quoted = schema(R"({"pattern": "^\"\\\\$"})");
  EXPECT_TRUE(JsonMatcher(quoted).advance(std::string_view(R"("\"\\")")));
}

TEST(PatternGrammar, AnUnanchoredPatternMatchesAnywhere) {
  const JsonGrammar g = schema(R"({"type": "string", "pattern": "ab"})");
  JsonMatcher m(g);
  ASSERT_TRUE(takes(m, "\"xx"));
  EXPECT_FALSE(JsonMatcher(m).advance('"'));  // no "ab" yet
  ASSERT_TRUE(takes(m, "abyy\""));
  EXPECT_TRUE(m.done());
}

TEST(PatternGrammar, FormatsRefuseImpossibleValuesAtTheirFirstWrongCharacter) {
  const JsonGrammar date = schema(R"({"type": "string", "format": "date"})");
  JsonMatcher m(date);
  ASSERT_TRUE(takes(m, "\"2023-02-2"));
  EXPECT_FALSE(JsonMatcher(m).advance('9'));  // 2023 is not a leap year
  EXPECT_TRUE(JsonMatcher(date).advance(std::string_view("\"2024-02-29\"")));
  EXPECT_FALSE(JsonMatcher(date).advance(std::string_view("\"2024-13")));
  const JsonGrammar ip = schema(R"({"format": "ipv4"})");
  EXPECT_TRUE(JsonMatcher(ip).advance(std::string_view("\"10.0.255.1\"")));
  EXPECT_FALSE(JsonMatcher(ip).advance(std::string_view("\"10.0.256")));
  const JsonGrammar span = schema(R"({"format": "duration"})");
  for (const char* in : {"\"P1DT2H\"", "\"PT0.5S\"", "\"P3W\"", "\"P1Y2M3DT4H5M6S\"", "\"P1M\"", "\"PT1M\""}) {
    EXPECT_TRUE(JsonMatcher(span).advance(std::string_view(in))) << in;
  }
  for (const char* out : {"\"P\"", "\"PT\"", "\"P1H", "\"P1.5D", "\"P1W2", "\"P1D1", "\"-P"}) {
    EXPECT_FALSE(JsonMatcher(span).advance(std::string_view(out))) << out;
  }
  // Numbers a Pydantic timedelta holds: the largest of each, and one digit more.
  EXPECT_TRUE(JsonMatcher(span).advance(std::string_view("\"P999999Y999999M99999999DT99999H999999M99999999.999999999S\"")));
  EXPECT_TRUE(JsonMatcher(span).advance(std::string_view("\"P99999999W\"")));
  for (const char* out : {"\"P1234567Y", "\"P1Y1234567M", "\"P123456789", "\"PT123456H", "\"PT1H1234567",
                          "\"PT123456789", "\"PT1.1234567890"}) {
    EXPECT_FALSE(JsonMatcher(span).advance(std::string_view(out))) << out;
  }
}

// Pydantic's own formats: its UUID4's version and variant digits, an address
// of either family, SecretStr's any string, bytes' ASCII (Pydantic counts
// their maxLength in bytes: "ééé" would be 6).
TEST(PatternGrammar, PydanticsFormats) {
  const JsonGrammar v4 = schema(R"({"type": "string", "format": "uuid4"})");
  EXPECT_TRUE(JsonMatcher(v4).advance(std::string_view("\"12345678-9abc-4def-8123-456789ABCDEF\"")));
  EXPECT_FALSE(JsonMatcher(v4).advance(std::string_view("\"12345678-9abc-1")));  // version 1
  EXPECT_FALSE(JsonMatcher(v4).advance(std::string_view("\"12345678-9abc-4def-c")));  // not RFC 4122's variant
  const JsonGrammar v7 = schema(R"({"type": "string", "format": "uuid7"})");
  EXPECT_TRUE(JsonMatcher(v7).advance(std::string_view("\"01890a5d-ac96-774b-bcce-b302099a8057\"")));
  const JsonGrammar any_ip = schema(R"({"type": "string", "format": "ipvanyaddress"})");
  for (const char* in : {"\"10.0.0.1\"", "\"::1\"", "\"::ffff:192.0.2.128\""}) {
    EXPECT_TRUE(JsonMatcher(any_ip).advance(std::string_view(in))) << in;
  }
  EXPECT_FALSE(JsonMatcher(any_ip).advance(std::string_view("\"10.0.0.256")));
  // Networks: no bit set past the prefix length (Python's ipaddress is strict so).
  const JsonGrammar net = schema(R"({"type": "string", "format": "ipvanynetwork"})");
  for (const char* in : {"10.0.0.0/8", "10.128.0.0/9", "10.0.0.1", "0.0.0.0/0", "192.168.1.4/30", "1.2.3.4/32",
                         "2001:db8::/32", "::/0", "1:2:3:4:5:6:7::/112", "::1/128", "::1"}) {
    EXPECT_TRUE(JsonMatcher(net).advance(std::string_view("\"" + std::string(in) + "\""))) << in;
  }
  for (const char* out : {"10.0.0.1/8", "10.64.0.0/9", "192.168.1.2/30", "10.0.0.0/33", "2001:db8::1/32", "::/1"}) {
    EXPECT_FALSE(JsonMatcher(net).advance(std::string_view("\"" + std::string(out) + "\""))) << out;
  }
  const JsonGrammar interface = schema(R"({"type": "string", "format": "ipvanyinterface"})");
  for (const char* in : {"10.0.0.1/8", "10.0.0.1", "::1/64", "2001:db8::1/128"}) {
    EXPECT_TRUE(JsonMatcher(interface).advance(std::string_view("\"" + std::string(in) + "\""))) << in;
  }
  for (const char* out : {"10.0.0.1/33", "::1/129", "10.0.0.1/08"}) {
    EXPECT_FALSE(JsonMatcher(interface).advance(std::string_view("\"" + std::string(out) + "\""))) << out;
  }
  const JsonGrammar secret = schema(R"({"type": "string", "format": "password"})");
  EXPECT_TRUE(JsonMatcher(secret).advance(std::string_view("\"d\u00e9j\u00e0 vu\\n \\\" \"")));
  const JsonGrammar blob = schema(R"({"type": "string", "format": "binary", "maxLength": 4})");
  EXPECT_TRUE(JsonMatcher(blob).advance(std::string_view("\"ab\\n\\\"\"")));
  EXPECT_FALSE(JsonMatcher(blob).advance(std::string_view("\"\u00e9")));
  EXPECT_FALSE(JsonMatcher(blob).advance(std::string_view("\"abcde")));
}

// URIs that a WHATWG URL parser (Pydantic's AnyUrl) reads as well as RFC
// 3986: hosts it would not parse, ports past 65535 and special schemes
// without an authority are refused at their first wrong character; a uri of
// Pydantic's HttpUrl length is http or https.
TEST(PatternGrammar, UrisAreOnesAWhatwgParserTakes) {
  const JsonGrammar uri = schema(R"({"type": "string", "format": "uri"})");
  for (const char* in : {"mailto:a@b", "urn:isbn:1", "x://a", "file:x", "HTTPS://A.example/x?y#z", "http://a:65535",
                         "ws://[::1]/", "https://u:p@10.0.0.1/", "hTtPx:y", "httpsx:y", "ftpx:y", "wsx:y", "w:y"}) {
    EXPECT_TRUE(JsonMatcher(uri).advance(std::string_view("\"" + std::string(in) + "\""))) << in;
  }
  for (const char* out : {"http:x", "https:/x", "ws:?", "http://a:65536", "http://999.1.1.1/", "http://a.0x1",
                          "http://xn--a", "http://", "x://a@/", "http://[v1.x]", "http://a.b.", "x://a_b"}) {
    EXPECT_FALSE(JsonMatcher(uri).advance(std::string_view("\"" + std::string(out) + "\""))) << out;
  }
  const JsonGrammar http = schema(R"({"type": "string", "format": "uri", "maxLength": 2083})");
  EXPECT_TRUE(JsonMatcher(http).advance(std::string_view("\"https://a.b/c\"")));
  for (const char* out : {"\"ftp:", "\"x:", "\"httpx"}) EXPECT_FALSE(JsonMatcher(http).advance(std::string_view(out))) << out;
}

// Addresses email-validator (Pydantic's EmailStr) takes: no special-use top
// label, in any case (a longer word is one no more), no "--", and lengths
// that keep the whole within 254 characters.
TEST(PatternGrammar, EmailsAreOnesEmailValidatorTakes) {
  const JsonGrammar mail = schema(R"({"type": "string", "format": "email"})");
  for (const char* in : {"a@b.io", "a.b+c@d.e.fg", "x@b.example", "y@b.localhostx", "z@b.tests", "w@b.te", "v@B.ARP",
                         "u@a-b-c.co"}) {
    EXPECT_TRUE(JsonMatcher(mail).advance(std::string_view("\"" + std::string(in) + "\""))) << in;
  }
  const std::string long_label = "a@" + std::string(48, 'b') + ".io", long_local = std::string(16, 'a') + "@b.io";
  for (const std::string out : {"a@b.test", "a@b.local", "a@b.LOCALHOST", "a@b.Onion", "a@b.arpa", "a@b.invalid",
                                "a@b-.io", "a@xn--a.io", "a@b.i0", "a@b.c", "a@io", long_label.c_str(),
                                long_local.c_str(), "a.b.c.d.e@f.io"}) {
    EXPECT_FALSE(JsonMatcher(mail).advance(std::string_view("\"" + out + "\""))) << out;
  }
}

// Pydantic's HttpUrl: a URI of 1 to 2,083 characters. Its automaton times
// every length would pass the budget, so the matcher counts characters and
// takes a byte only where a match can still end within the maximum.
TEST(PatternGrammar, ALongMaximumBesideALargeAutomatonIsCounted) {
  const JsonGrammar url = schema(R"({"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083})");
  ASSERT_EQ(url.nodes[static_cast<size_t>(url.root)].counted_max_length, 2083) << "the counted path";
  const std::string head = "\"http://h/" + std::string(2071, 'a');  // 2,080 characters
  EXPECT_TRUE(JsonMatcher(url).advance(std::string_view(head + "%20\"")));  // 2,083
  EXPECT_FALSE(JsonMatcher(url).advance(std::string_view(head + "%20a")));
  EXPECT_TRUE(JsonMatcher(url).advance(std::string_view(head + "\\/ab\"")));  // an escape is one character
  EXPECT_FALSE(JsonMatcher(url).advance(std::string_view(head + "\\/abc")));
  JsonMatcher full(url);
  ASSERT_TRUE(full.advance(std::string_view(head + "abc")));
  EXPECT_FALSE(JsonMatcher(full).advance('d'));  // a 2,084th character
  EXPECT_TRUE(JsonMatcher(full).advance('"'));
  JsonMatcher near(url);
  ASSERT_TRUE(near.advance(std::string_view(head + "a")));
  EXPECT_FALSE(JsonMatcher(near).advance('%'));   // its two hex digits would make 2,084
  EXPECT_TRUE(JsonMatcher(near).advance('b'));
  EXPECT_FALSE(JsonMatcher(near).advance(std::string_view("\u00e9\u00e9")));  // not a URI's character anyway
  EXPECT_FALSE(JsonMatcher(url).advance(std::string_view("\"\"")));  // minLength 1, and "" is no URI
  // A host name's own bound: 253 characters, counted (no maxLength in the schema).
  const JsonGrammar host = schema(R"({"format": "hostname"})");
  ASSERT_EQ(host.nodes[static_cast<size_t>(host.root)].counted_max_length, 253);
  std::string labels;  // 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 characters
  for (const int size : {63, 63, 63, 61}) labels += (labels.empty() ? "" : ".") + std::string(size, 'a');
  EXPECT_TRUE(JsonMatcher(host).advance(std::string_view("\"" + labels + "\"")));
  EXPECT_FALSE(JsonMatcher(host).advance(std::string_view("\"" + labels + "a")));  // a 254th character
  EXPECT_FALSE(JsonMatcher(host).advance(std::string_view("\"" + std::string(64, 'a'))));  // a 64-letter label
  for (const char* out : {"\"-a", "\"a-\"", "\"a..b", "\"a.\"", "\"a_b"}) {
    EXPECT_FALSE(JsonMatcher(host).advance(std::string_view(out))) << out;
  }
  EXPECT_TRUE(JsonMatcher(host).advance(std::string_view("\"my-host.example.com\"")));
  const JsonGrammar ipv6 = schema(R"({"format": "ipv6"})");
  EXPECT_TRUE(JsonMatcher(ipv6).advance(std::string_view("\"::ffff:10.0.0.1\"")));
  EXPECT_FALSE(JsonMatcher(ipv6).advance(std::string_view("\"1::2::")));
}

TEST(PatternGrammar, LengthBoundsApplyBesideAPattern) {
  const JsonGrammar g = schema(R"({"type": "string", "pattern": "^[a-z]*$", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(JsonMatcher(g).advance(std::string_view("\"a\"")));
  EXPECT_TRUE(JsonMatcher(g).advance(std::string_view("\"abc\"")));
  EXPECT_FALSE(JsonMatcher(g).advance(std::string_view("\"abcd")));
}

TEST(PatternGrammar, GuidedRegexIsTheWholeText) {
  const JsonGrammar choice = guided_regex("(yes|no)");
  JsonMatcher m(choice);
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(JsonMatcher(m).advance(' '));  // no whitespace before raw text
  ASSERT_TRUE(takes(m, "ye"));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.advance('s'));
  EXPECT_TRUE(m.done());  // nothing extends "yes": the output ends there

  const JsonGrammar number = guided_regex(R"(\d+(\.\d+)?)");
  JsonMatcher n(number);
  ASSERT_TRUE(takes(n, "12"));
  EXPECT_TRUE(n.can_end());
  EXPECT_FALSE(n.done());
  ASSERT_TRUE(n.advance('.'));
  EXPECT_FALSE(n.can_end());
  EXPECT_FALSE(JsonMatcher(n).advance('x'));

  EXPECT_TRUE(JsonMatcher(guided_regex("a*")).can_end());  // the empty text matches
}

// Random walks over allowed tokens: at every state some token is allowed or
// the text may end. (Bounded numbers, tuples, maps, keys and distinct items ride along.)
TEST(PatternGrammar, AllowedTokensNeverLeadIntoADeadEnd) {
  std::vector<std::pair<std::string, std::shared_ptr<GrammarVocabulary>>> vocabularies;
  const auto demo_dir = testing::real_tokenizer_root() / "pattern_demo";
  write_demo_tokenizer(demo_dir);
  vocabularies.emplace_back("demo", std::make_shared<GrammarVocabulary>(*load_tokenizer(demo_dir)));
  if (const auto dir = testing::qwen2_dir()) {
    vocabularies.emplace_back("qwen2", std::make_shared<GrammarVocabulary>(*load_tokenizer(*dir)));
  }
  std::vector<std::shared_ptr<const JsonGrammar>> grammars;
  for (const char* text :
       {R"({"type": "object", "properties": {"when": {"format": "date-time"}, "mail": {"format": "email"},
            "code": {"pattern": "^[A-Z]{2}-\\d{3}$"}, "q": {"pattern": "^[\"\\\\a]{2,4}$"}},
            "required": ["when", "mail", "code", "q"]})",
        R"({"type": "array", "items": {"type": "string", "pattern": "x\\s*y", "maxLength": 6}, "maxItems": 3})",
        R"({"type": "string", "pattern": "^[\\u0400-\\u04FF ]{3,8}$"})",
        R"({"type": "array", "items": {"type": "string", "format": "uri", "maxLength": 40}, "maxItems": 2})",
        R"({"type": "array", "items": {"enum": ["a", "ab", 3, true]}, "uniqueItems": true, "minItems": 4})",
        R"({"type": "object", "additionalProperties": {"type": "integer", "maximum": 3},
            "propertyNames": {"enum": ["a", "ab"]}, "maxProperties": 2})",
        R"({"type": "object", "propertyNames": {"pattern": "^x[0-9]$"}, "minProperties": 1, "maxProperties": 2})",
        // Bounded numbers, a tuple and a map (not patterns, but as prone to dead ends).
        R"({"type": "object", "properties": {"p": {"type": "number", "minimum": 0.1, "maximum": 0.3},
            "t": {"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 2.5},
            "pair": {"prefixItems": [{"type": "integer", "minimum": 3, "maximum": 7},
                                     {"type": "number", "minimum": 999.5, "maximum": 1000}], "items": false,
                     "minItems": 2},
            "m": {"type": "object", "additionalProperties": {"type": "number", "maximum": -1}}},
            "required": ["p", "t", "pair", "m"]})"}) {
    grammars.push_back(std::make_shared<const JsonGrammar>(schema(text)));
  }
  for (const char* pattern : {R"(Answer: (A|B|C|D))", R"([a-z]+@[a-z]+\.(com|org))", R"(\d{1,3}(,\d{3})*)"}) {
    grammars.push_back(std::make_shared<const JsonGrammar>(guided_regex(pattern)));
  }
  std::mt19937 rng(11);
  for (const auto& [name, vocabulary] : vocabularies) {
    SCOPED_TRACE(name);
    int ended = 0;
    for (size_t g = 0; g < grammars.size(); ++g) {
      for (int walk = 0; walk < 12; ++walk) {
        JsonTokenMatcher m(grammars[g], vocabulary);
        std::string text;
        for (int step = 0; step < 80 && !m.done(); ++step) {
          std::vector<uint64_t> bits((static_cast<size_t>(vocabulary->size()) + 63) / 64, 0);
          m.allowed(bits);
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < vocabulary->size(); ++id) {
            if (bits[id / 64] >> (id % 64) & 1) allowed.push_back(id);
          }
          if (allowed.empty()) {
            ASSERT_TRUE(m.can_end()) << "grammar " << g << ": nothing allowed after '" << text << "'";
            break;
          }
          if (m.can_end() && rng() % 4 == 0) break;
          // Short tokens more often, so that walks reach the values' ends.
          int32_t id = allowed[rng() % allowed.size()];
          for (int tries = 0; tries < 3 && vocabulary->bytes(id).size() > 2; ++tries) {
            id = allowed[rng() % allowed.size()];
          }
          ASSERT_TRUE(m.accept(id)) << "an allowed token was refused";
          text += vocabulary->bytes(id);
        }
        ended += m.can_end() ? 1 : 0;
      }
    }
    EXPECT_GT(ended, 10);
  }
}

}  // namespace
}  // namespace tessera::text
