// tessera_bench_grammar: what structured output costs a step on the host.
//
//   tessera_bench_grammar [--repeat N] NAME=MODEL_DIR...
//
// For each model directory's tokenizer: the time to index its vocabulary
// (GrammarVocabulary, once per server), then, for response_format
// json_object, a small schema, a schema of a format and a pattern, a URI of
// up to 2,083 characters (far from and near that maximum), and a
// guided_regex, the mean time of one step's token mask
// (GrammarVocabulary::allowed) at each of a few points of a document: before
// it, between values, inside a key, inside a string (with and without a
// pattern), inside a number. One JSON line each: {"name", "vocab",
// "index_ms"} then {"name", "grammar", "after", "allowed", "mask_ms"}, with
// "cached_mask_ms" inside a pattern: the mask once the pattern state's plain
// tokens are cached, as on a request's later visits to that state.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_args.h"
#include "core/error.h"
#include "text/grammar_vocabulary.h"
#include "text/json_grammar.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The schemas' documents, and the prefixes of them a mask is timed after.
constexpr const char* kSchema =
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age", "tags"]})";
const std::vector<std::string> kPrefixes = {
    "", "{", "{\"na", "{\"name\": ", "{\"name\": \"Ada Lo", "{\"name\": \"Ada\", \"age\": 3",
    "{\"name\": \"Ada\", \"age\": 36, \"tags\": [\"x\\u00"};
constexpr const char* kPatternSchema =
    R"({"type": "object", "properties": {"mail": {"format": "email"}, "note": {"pattern": "^[^\\n]*$"}},
        "required": ["mail", "note"]})";
const std::vector<std::string> kPatternPrefixes = {"{\"mail\": \"", "{\"mail\": \"ada.lo",
                                                   "{\"mail\": \"a@b.io\", \"note\": \"Ada Lo"};
// Pydantic's HttpUrl: a URI of 1 to 2,083 characters, whose maximum the
// matcher counts; far from it, and 10 characters before it.
constexpr const char* kUrlSchema =
    R"({"type": "object", "properties": {"site": {"type": "string", "format": "uri", "minLength": 1,
        "maxLength": 2083}}, "required": ["site"]})";
const std::vector<std::string> kUrlPrefixes = {"{\"site\": \"https://example.com/pa",
                                               "{\"site\": \"https://example.com/" + std::string(2053, 'a')};
constexpr const char* kGuidedRegex = R"((yes|no), \d{1,3} (apples|pears)\.)";
const std::vector<std::string> kRegexPrefixes = {"", "yes, 1"};

// A long prefix by its length and its end.
std::string shortened(const std::string& prefix) {
  if (prefix.size() <= 60) return prefix;
  std::ostringstream out;
  out << "(" << prefix.size() << " bytes) ..." << prefix.substr(prefix.size() - 20);
  return out.str();
}

tessera::text::JsonGrammar guided_regex(const char* pattern) {
  tessera::text::JsonGrammarBuilder builder;
  const int32_t root = builder.regex(pattern);
  return builder.finish(root);
}

void bench(const std::string& name, const std::string& dir, int repeat) {
  const std::unique_ptr<tessera::text::Tokenizer> tokenizer = tessera::text::load_tokenizer(dir);
  const Clock::time_point start = Clock::now();
  const tessera::text::GrammarVocabulary vocabulary(*tokenizer);
  std::cout << nlohmann::json{{"name", name}, {"vocab", vocabulary.size()}, {"index_ms", ms_since(start)}}.dump()
            << "\n";
  struct Grammar {
    const char* name;
    tessera::text::JsonGrammar grammar;
    const std::vector<std::string>& prefixes;
  };
  const Grammar grammars[] = {
      {"json_object", tessera::text::any_json_object(), kPrefixes},
      {"schema", tessera::text::compile_json_schema(nlohmann::ordered_json::parse(kSchema)), kPrefixes},
      {"pattern_schema", tessera::text::compile_json_schema(nlohmann::ordered_json::parse(kPatternSchema)),
       kPatternPrefixes},
      {"url_schema", tessera::text::compile_json_schema(nlohmann::ordered_json::parse(kUrlSchema)), kUrlPrefixes},
      {"guided_regex", guided_regex(kGuidedRegex), kRegexPrefixes}};
  std::vector<uint64_t> bits((static_cast<size_t>(vocabulary.size()) + 63) / 64);
  for (const auto& [grammar_name, grammar, prefixes] : grammars) {
    for (const std::string& prefix : prefixes) {
      tessera::text::JsonMatcher matcher(grammar);
      if (!matcher.advance(std::string_view(prefix))) continue;  // json_object's keys are free, the schema's not
      const Clock::time_point t0 = Clock::now();
      for (int i = 0; i < repeat; ++i) {
        std::fill(bits.begin(), bits.end(), 0);
        vocabulary.allowed(matcher, bits);
      }
      const double mask_ms = ms_since(t0) / repeat;
      int64_t allowed = 0;
      for (uint64_t w : bits) allowed += __builtin_popcountll(w);
      const std::string after = shortened(prefix);
      nlohmann::json line = {{"name", name}, {"grammar", grammar_name}, {"after", after}, {"allowed", allowed},
                             {"mask_ms", mask_ms}};
      // Inside a pattern: the mask again with the pattern state's plain tokens cached (a request's later steps).
      bool any_plain = false;
      std::vector<tessera::text::JsonMatcher::PatternState> patterns;
      if (matcher.in_string(any_plain, patterns) && !patterns.empty()) {
        tessera::text::PatternMaskCache cache;
        vocabulary.allowed(matcher, bits, &cache);
        const Clock::time_point t1 = Clock::now();
        for (int i = 0; i < repeat; ++i) {
          std::fill(bits.begin(), bits.end(), 0);
          vocabulary.allowed(matcher, bits, &cache);
        }
        line["cached_mask_ms"] = ms_since(t1) / repeat;
      }
      std::cout << line.dump() << "\n";
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<tessera::tools::BenchArgs> args = tessera::tools::parse_bench_args(argc, argv, 1, 20);
  if (!args) {
    std::cerr << "usage: tessera_bench_grammar [--repeat N] NAME=MODEL_DIR...\n";
    return 2;
  }
  try {
    for (const auto& [name, dir] : args->tokenizers) bench(name, dir, args->repeat);
  } catch (const tessera::Error& e) {
    std::cerr << e.message() << "\n";
    return 1;
  }
  return 0;
}
