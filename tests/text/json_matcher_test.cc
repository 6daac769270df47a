// JsonMatcher and the schema compiler against Python's json and jsonschema:
// tests/fixtures/json_grammar_cases.json (tools/make_json_grammar_cases.py)
// holds, for each schema, documents written as structured output writes them
// and byte-level mutations of them, each with the reference's verdict. The
// matcher must take every canonical document (all its bytes, then can_end)
// and no document the reference calls invalid.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "../test_paths.h"
#include "hex_text.h"
#include "core/error.h"
#include "text/json_grammar.h"
#include "text/json_matcher.h"

namespace tessera::text {
namespace {

using Json = nlohmann::ordered_json;

using testing::from_hex;

// Every byte taken and the value whole.
bool takes(const JsonGrammar& grammar, const std::string& text) {
  JsonMatcher matcher(grammar);
  for (char c : text) {
    if (!matcher.advance(static_cast<uint8_t>(c))) return false;
  }
  return matcher.can_end();
}

JsonGrammar grammar_of(const Json& schema) {
  return schema.is_null() ? any_json_object() : compile_json_schema(schema);
}

Json read_cases() {
  std::ifstream in(testing::fixtures_dir() / "json_grammar_cases.json");
  EXPECT_TRUE(in.good()) << "run tools/make_json_grammar_cases.py";
  return Json::parse(in);
}

TEST(JsonMatcher, AgreesWithPythonsJsonAndJsonschema) {
  const Json cases = read_cases();
  ASSERT_GE(cases["cases"].size(), 10u);
  int canonical = 0, invalid = 0;
  for (const Json& c : cases["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const JsonGrammar grammar = grammar_of(c["schema"]);
    for (const Json& d : c["documents"]) {
      const std::string text = from_hex(d["hex"].get<std::string>());
      const bool taken = takes(grammar, text);
      if (d["canonical"].get<bool>()) {
        ++canonical;
        EXPECT_TRUE(taken) << "a valid document refused: " << text;
      }
      if (!d["valid"].get<bool>()) {
        ++invalid;
        EXPECT_FALSE(taken) << "an invalid document taken: " << text;
      }
    }
  }
  EXPECT_GT(canonical, 200);
  EXPECT_GT(invalid, 500);
}

TEST(JsonMatcher, EndsAsTheValueDoes) {
  const JsonGrammar number = compile_json_schema(Json::parse(R"({"type": "number"})"));
  JsonMatcher m(number);
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.advance(std::string_view("-12")));
  EXPECT_TRUE(m.can_end());   // a number may end anywhere after a digit
  EXPECT_FALSE(m.done());     // or go on
  EXPECT_FALSE(m.advance(' '));  // nothing after a whole value, whitespace neither
  ASSERT_TRUE(m.advance('.'));
  EXPECT_FALSE(m.can_end());

  const JsonGrammar object = any_json_object();
  JsonMatcher o(object);
  EXPECT_FALSE(o.advance('['));  // json_object: an object at the top
  ASSERT_TRUE(o.advance(std::string_view(R"({"a": [1, {"b": null}]})")));
  EXPECT_TRUE(o.done());
  EXPECT_FALSE(o.advance('}'));

  const JsonGrammar enumeration = compile_json_schema(Json::parse(R"({"enum": [1, 10, true]})"));
  JsonMatcher e(enumeration);
  ASSERT_TRUE(e.advance('1'));
  EXPECT_TRUE(e.can_end());
  EXPECT_FALSE(e.done());
  ASSERT_TRUE(e.advance('0'));
  EXPECT_TRUE(e.done());
  JsonMatcher t(enumeration);
  ASSERT_TRUE(t.advance(std::string_view("true")));
  EXPECT_TRUE(t.done());
}

TEST(JsonMatcher, CapsWhitespaceAndDigits) {
  const JsonGrammar object = any_json_object();
  JsonMatcher m(object);
  ASSERT_TRUE(m.advance('{'));
  for (int i = 0; i < JsonMatcher::kMaxWhitespace; ++i) ASSERT_TRUE(m.advance(' '));
  EXPECT_FALSE(m.advance('\n'));
  ASSERT_TRUE(m.advance(std::string_view(R"("n": )")));
  for (int i = 0; i < JsonMatcher::kMaxDigits; ++i) ASSERT_TRUE(m.advance('7'));
  EXPECT_FALSE(m.advance('7'));
  EXPECT_TRUE(m.advance('}'));
}

TEST(JsonMatcher, ACompactGrammarTakesNoWhitespaceBetweenTokensButKeepsItInStrings) {
  const Json schema = Json::parse(R"({
    "type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}, "required": ["a"]})");
  JsonGrammar compact = compile_json_schema(schema);
  compact.max_whitespace = 0;
  EXPECT_TRUE(takes(compact, R"({"a":["x y","\n"]})"));
  const JsonGrammar pretty = compile_json_schema(schema);
  for (const char* spaced : {R"({ "a":[]})", R"({"a": []})", R"({"a":[ ]})", "{\"a\":[]\n}", R"({"a":["x" ,"y"]})"}) {
    EXPECT_FALSE(takes(compact, spaced)) << spaced;
    EXPECT_TRUE(takes(pretty, spaced)) << spaced << ": the default cap takes it";
  }
}

TEST(JsonMatcher, WritesPropertiesInTheSchemasOrder) {
  const JsonGrammar grammar = compile_json_schema(Json::parse(R"({
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
    "required": ["b"]})"));
  EXPECT_TRUE(takes(grammar, R"({"a":1,"b":2,"c":3})"));
  EXPECT_TRUE(takes(grammar, R"({"b":2})"));
  EXPECT_TRUE(takes(grammar, R"({"a":1,"b":2})"));
  EXPECT_FALSE(takes(grammar, R"({"b":2,"a":1})"));   // out of order
  EXPECT_FALSE(takes(grammar, R"({"a":1,"c":3})"));   // b is required
  EXPECT_FALSE(takes(grammar, R"({"b":2,"b":2})"));   // twice
  EXPECT_FALSE(takes(grammar, R"({"b":2,"d":4})"));   // not listed
  EXPECT_FALSE(takes(grammar, R"({})"));
}

TEST(JsonMatcher, CountsStringLengthsInCodePoints) {
  const JsonGrammar grammar = compile_json_schema(Json::parse(R"({"type": "string", "minLength": 2, "maxLength": 2})"));
  EXPECT_TRUE(takes(grammar, "\"\xC3\xA9\xE4\xB8\xAD\""));         // é中
  EXPECT_TRUE(takes(grammar, R"("\n\u0041")"));
  EXPECT_TRUE(takes(grammar, R"("a\ud83d\ude00")"));                // a pair is one code point
  EXPECT_FALSE(takes(grammar, R"("\ud83d\ude00")"));
  EXPECT_FALSE(takes(grammar, "\"abc\""));
  EXPECT_FALSE(takes(grammar, "\"\xC3\""));                          // a lead byte without its continuation
  EXPECT_FALSE(takes(grammar, "\"\xED\xA0\x80\xC3\xA9\""));           // a surrogate in UTF-8
  EXPECT_FALSE(takes(grammar, "\"a\tb\""));                          // a raw control byte
}

TEST(JsonMatcher, KeepsIntegersWithinTheirBounds) {
  const JsonGrammar teens = compile_json_schema(Json::parse(R"({"type": "integer", "minimum": 10, "maximum": 20})"));
  for (const char* in : {"10", "15", "20"}) EXPECT_TRUE(takes(teens, in)) << in;
  for (const char* out : {"9", "21", "3", "-1", "0", "100", "1"}) EXPECT_FALSE(takes(teens, out)) << out;
  JsonMatcher m(teens);
  EXPECT_FALSE(m.advance('3'));  // 3, 30, 300...: none within
  EXPECT_FALSE(m.advance('-'));
  ASSERT_TRUE(m.advance('2'));   // 20 only
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.advance('1'));
  JsonMatcher z(teens);
  EXPECT_FALSE(z.advance('0'));  // a leading zero is 0 alone: refused before it strands the output
  const JsonGrammar below = compile_json_schema(Json::parse(R"({"type": "integer", "exclusiveMaximum": -2})"));
  for (const char* in : {"-3", "-30", "-123456"}) EXPECT_TRUE(takes(below, in)) << in;
  for (const char* out : {"-2", "-1", "-0", "0", "5"}) EXPECT_FALSE(takes(below, out)) << out;
  const JsonGrammar zero = compile_json_schema(Json::parse(R"({"type": "integer", "minimum": 0, "maximum": 0})"));
  EXPECT_TRUE(takes(zero, "0"));
  EXPECT_TRUE(takes(zero, "-0"));  // JSON's -0 is 0
  EXPECT_FALSE(takes(zero, "1"));
}

// Every pair of bounds near zero, each value from -150 to 150 against plain
// integer comparison. Minimum 1 (Pydantic's PositiveInt, exclusiveMinimum 0)
// once let every negative number through: its negative side's magnitude
// bound, -1, was the sentinel for none.
TEST(JsonMatcher, IntegerBoundsNearZeroHoldForEveryValue) {
  const std::optional<int> edges[] = {std::nullopt, -2, -1, 0, 1, 2};
  for (const std::optional<int>& low : edges) {
    for (const std::optional<int>& high : edges) {
      Json schema = {{"type", "integer"}};
      if (low) schema["minimum"] = *low;
      if (high) schema["maximum"] = *high;
      if (low && high && *high < *low) continue;
      const JsonGrammar grammar = compile_json_schema(schema);
      for (int v = -150; v <= 150; ++v) {
        const bool within = (!low || v >= *low) && (!high || v <= *high);
        EXPECT_EQ(takes(grammar, std::to_string(v)), within) << schema.dump() << " " << v;
      }
    }
  }
}

// multipleOf with every pair of bounds near zero: each value from -150 to
// 150 against integer arithmetic, and each prefix of up to three bytes taken
// exactly when some value that is taken starts with it (so the output is
// never stranded). Every such prefix extends by one or two digits to a
// multiple of m <= 10, so values within ±99,999 are enough to look at.
TEST(JsonMatcher, MultiplesWithBoundsNearZeroHoldForEveryValueAndPrefix) {
  const std::optional<int> edges[] = {std::nullopt, -20, -1, 0, 1, 13};
  std::vector<std::string> prefixes = {""};
  for (size_t begin = 0, length = 0; length < 3; ++length) {
    const size_t end = prefixes.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : std::string("-0123456789")) prefixes.push_back(prefixes[i] + c);
    }
    begin = end;
  }
  for (int m : {2, 3, 7, 10}) {
    for (const std::optional<int>& low : edges) {
      for (const std::optional<int>& high : edges) {
        if (low && high && *high < *low) continue;
        Json schema = {{"type", "integer"}, {"multipleOf", m}};
        if (low) schema["minimum"] = *low;
        if (high) schema["maximum"] = *high;
        const auto taken = [&](int v) { return (!low || v >= *low) && (!high || v <= *high) && v % m == 0; };
        bool any = false;
        for (int v = -99'999; v <= 99'999 && !any; ++v) any = taken(v);
        if (!any) continue;  // refused, as RefusesWhatItCannotEnforceNamingWhere shows
        const JsonGrammar grammar = compile_json_schema(schema);
        for (int v = -150; v <= 150; ++v) {
          EXPECT_EQ(takes(grammar, std::to_string(v)), taken(v)) << schema.dump() << " " << v;
        }
        std::set<std::string> open;  // every prefix of a value taken
        for (int v = -99'999; v <= 99'999; ++v) {
          if (!taken(v)) continue;
          const std::string text = std::to_string(v);
          for (size_t k = 0; k <= std::min<size_t>(3, text.size()); ++k) open.insert(text.substr(0, k));
          if (v == 0) open.insert("-"), open.insert("-0");  // JSON's -0 is 0
        }
        for (const std::string& prefix : prefixes) {
          JsonMatcher matcher(grammar);
          bool follows = true;
          for (char c : prefix) follows = follows && matcher.advance(static_cast<uint8_t>(c));
          EXPECT_EQ(follows, open.contains(prefix)) << schema.dump() << " '" << prefix << "'";
        }
      }
    }
  }
}

// A number under a whole multipleOf is written as an integer; the bounds
// round inward.
TEST(JsonMatcher, ANumbersWholeMultipleIsWrittenAsAnInteger) {
  const JsonGrammar fives =
      compile_json_schema(Json::parse(R"({"type": "number", "multipleOf": 5, "minimum": 0.5, "maximum": 20.5})"));
  for (const char* in : {"5", "10", "20"}) EXPECT_TRUE(takes(fives, in)) << in;
  for (const char* out : {"0", "25", "12", "10.0", "1e1", "-5"}) EXPECT_FALSE(takes(fives, out)) << out;
  // Without bounds, at most 15 digits: a reader dividing in doubles is exact below 2^53.
  const JsonGrammar pairs = compile_json_schema(Json::parse(R"({"type": "integer", "multipleOf": 2.0})"));
  EXPECT_TRUE(takes(pairs, "999999999999998"));
  EXPECT_FALSE(takes(pairs, "1000000000000000"));
  EXPECT_FALSE(takes(pairs, "999999999999999"));
  // multipleOf 1 asks no more than an integer: its 24 digits.
  EXPECT_TRUE(takes(compile_json_schema(Json::parse(R"({"type": "number", "multipleOf": 1})")),
                    "123456789012345678901234"));
}

// Pydantic's set[Color]: uniqueItems over the items of an enum, through a $ref.
TEST(JsonMatcher, DistinctItemsTakeEachValueOnce) {
  const JsonGrammar colors = compile_json_schema(Json::parse(R"({
    "$defs": {"Color": {"enum": ["red", "green", "blue"], "type": "string"}},
    "type": "array", "items": {"$ref": "#/$defs/Color"}, "uniqueItems": true})"));
  for (const char* in : {"[]", R"(["red"])", R"(["blue", "red", "green"])", R"([ "green" , "blue" ])"}) {
    EXPECT_TRUE(takes(colors, in)) << in;
  }
  for (const char* out : {R"(["red", "red"])", R"(["blue", "red", "blue"])", R"(["red", "green", "blue", "red"])"}) {
    EXPECT_FALSE(takes(colors, out)) << out;
  }
  JsonMatcher all(colors);
  ASSERT_TRUE(all.advance(std::string_view(R"(["red", "green", "blue")")));
  EXPECT_FALSE(JsonMatcher(all).advance(','));  // no value left: no fourth item begins
  JsonMatcher two(colors);
  ASSERT_TRUE(two.advance(std::string_view(R"(["green", "r)")));
  EXPECT_FALSE(JsonMatcher(two).advance(std::string_view(R"(ed", "g)")));  // green is taken
  EXPECT_TRUE(JsonMatcher(two).advance(std::string_view(R"(ed", "b)")));
  // A value that begins another (1 and 12): the item is known at the byte after it.
  const JsonGrammar numbers = compile_json_schema(Json::parse(R"({"items": {"enum": [1, 12, true]}, "uniqueItems": true})"));
  EXPECT_TRUE(takes(numbers, "[12,1,true]"));
  EXPECT_FALSE(takes(numbers, "[1,12,1]"));
  EXPECT_FALSE(takes(numbers, "[12,true,12]"));
  EXPECT_FALSE(takes(numbers, "[true,true]"));
}

// Pydantic's dict[Color, int] and a dict whose keys have a pattern: propertyNames.
TEST(JsonMatcher, AMapsKeysHoldToPropertyNames) {
  const JsonGrammar by_color = compile_json_schema(Json::parse(R"({
    "$defs": {"Color": {"enum": ["red", "green", "r"], "type": "string"}},
    "type": "object", "additionalProperties": {"type": "integer"}, "propertyNames": {"$ref": "#/$defs/Color"}})"));
  for (const char* in : {"{}", R"({"red": 1})", R"({"r": 2, "green": 3})", R"({ "green" : 3 , "r":1 })"}) {
    EXPECT_TRUE(takes(by_color, in)) << in;
  }
  for (const char* out : {R"({"blue": 1})", R"({"re": 1})", R"({"redd": 1})", R"({"": 1})", R"({"red": "x"})"}) {
    EXPECT_FALSE(takes(by_color, out)) << out;
  }
  const JsonGrammar by_code = compile_json_schema(Json::parse(R"({
    "type": "object", "propertyNames": {"pattern": "^[A-Z]{2}$"}, "maxProperties": 2})"));
  EXPECT_TRUE(takes(by_code, R"({"FR": 1, "DE": [true]})"));
  EXPECT_FALSE(takes(by_code, R"({"fr": 1})"));
  EXPECT_FALSE(takes(by_code, R"({"FRA": 1})"));
  EXPECT_FALSE(JsonMatcher(by_code).advance(std::string_view(R"({"F")")));  // refused at the quote
}

// Pydantic's dict[constr(pattern=...), int]: patternProperties of one pattern
// writes only keys that match it, each with the pattern's values, whatever
// additionalProperties says of other keys.
TEST(JsonMatcher, AMapsPatternPropertiesHoldItsKeysAndValues) {
  for (const char* extra : {"", R"(, "additionalProperties": false)", R"(, "additionalProperties": {"type": "null"})"}) {
    const JsonGrammar codes = compile_json_schema(Json::parse(
        std::string(R"({"type": "object", "patternProperties": {"^[a-z]{2}_\\d$": {"type": "integer"}}, )"
                    R"("minProperties": 1)") + extra + "}"));
    for (const char* in : {R"({"ab_1": 1})", R"({"zz_9": -3, "ab_0": 0})"}) EXPECT_TRUE(takes(codes, in)) << extra << in;
    for (const char* out : {"{}", R"({"ab_1": "x"})", R"({"ab1": 1})", R"({"abc_1": 1})", R"({"x": null})"}) {
      EXPECT_FALSE(takes(codes, out)) << extra << out;
    }
  }
  // Unanchored, as JSON Schema matches patterns: any key holding a digit.
  const JsonGrammar digits = compile_json_schema(Json::parse(R"({"patternProperties": {"[0-9]": {}}})"));
  EXPECT_TRUE(takes(digits, R"({"a1b": [1], "9": {}})"));
  EXPECT_FALSE(takes(digits, R"({"ab": 1})"));
  EXPECT_FALSE(takes(digits, "[]"));  // typed as an object by its keyword
}

// Keywords of one type give an untyped schema that type, so that they are
// kept: {"propertyNames": ...} once took any value, keys of any name too (and
// {"uniqueItems": true} lists with repeats; RefusesWhatItCannotEnforceNamingWhere
// shows it refused now, as it is with its type).
TEST(JsonMatcher, AnUntypedSchemaTakesItsTypeFromItsKeywords) {
  const JsonGrammar named = compile_json_schema(Json::parse(R"({"propertyNames": {"enum": ["a"]}})"));
  EXPECT_TRUE(takes(named, R"({"a": 1})"));
  EXPECT_FALSE(takes(named, R"({"b": 1})"));
}

TEST(JsonMatcher, FollowsRecursiveReferences) {
  const JsonGrammar grammar = compile_json_schema(Json::parse(R"({
    "type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["next"]})"));
  EXPECT_TRUE(takes(grammar, R"({"next":{"next":{"next":null}}})"));
  EXPECT_FALSE(takes(grammar, R"({"next":{"next":{}}})"));
}

TEST(JsonMatcher, RawTextTakesNoWhitespaceBeforeItEvenAmongJsonOptions) {
  JsonGrammarBuilder builder;
  const int32_t text = builder.raw("yes");
  const int32_t json = builder.schema(Json::parse(R"({"type": "string"})"), "test");
  const JsonGrammar grammar = builder.finish(builder.any_of({text, json}));
  EXPECT_TRUE(takes(grammar, "yes"));
  EXPECT_FALSE(takes(grammar, " yes"));
  EXPECT_TRUE(takes(grammar, R"( "yes")"));  // a JSON string may have whitespace before it
  JsonMatcher m(grammar);
  ASSERT_TRUE(m.advance(std::string_view("yes")));
  EXPECT_TRUE(m.done());
}

void expect_refused(const std::string& schema, const std::string& words) {
  try {
    compile_json_schema(Json::parse(schema));
    ADD_FAILURE() << "compiled: " << schema;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find(words), std::string::npos) << e.message();
  }
}

TEST(JsonGrammar, RefusesWhatItCannotEnforceNamingWhere) {
  expect_refused(R"({"type": "string", "pattern": "(a)\\1"})", "'#/pattern': backreferences are not supported");
  expect_refused(R"({"type": "object", "properties": {"d": {"type": "string", "format": "iri"}}})",
                 "'#/properties/d/format': format 'iri' is not supported (supported: date, time");
  expect_refused(R"({"type": "string", "pattern": "^ab$", "minLength": 3})", "no string of at least 3");
  expect_refused(R"({"pattern": "a", "format": "date"})", "pattern and format together");
  expect_refused(R"({"type": "array", "uniqueItems": true})", "'#/uniqueItems': uniqueItems is supported for items of");
  expect_refused(R"({"uniqueItems": true})", "'#/uniqueItems': uniqueItems is supported for items of");
  expect_refused(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})", "an enum, const or boolean");
  expect_refused(R"({"type": "array", "items": {"enum": [1, 1.0, 2]}, "uniqueItems": true})",
                 "the items' values 1 and 1.0 are equal");
  expect_refused(R"({"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": true, "minItems": 3})",
                 "minItems is more than the items the array may hold");
  expect_refused(R"({"type": "array", "items": {"const": 1}, "uniqueItems": "yes"})", "must be true or false");
  expect_refused(R"({"type": "object", "propertyNames": {"enum": ["a", 1]}})",
                 "'#/propertyNames': propertyNames must be a string's schema or an enum of strings");
  expect_refused(R"({"type": "object", "properties": {"a": {}}, "propertyNames": {"maxLength": 3}})",
                 "propertyNames and patternProperties are supported on objects without properties");
  expect_refused(R"({"type": "object", "properties": {"a": {}}, "patternProperties": {"^b": {}}})",
                 "propertyNames and patternProperties are supported on objects without properties");
  expect_refused(R"({"type": "object", "patternProperties": {"^a": {}, "^b": {}}})",
                 "'#/patternProperties': patternProperties is supported with one pattern");
  expect_refused(R"({"type": "object", "patternProperties": {"^a": {}}, "propertyNames": {"maxLength": 3}})",
                 "patternProperties beside propertyNames is not supported");
  expect_refused(R"({"type": "object", "patternProperties": {"(a)\\1/x": {}}})",
                 "'#/patternProperties/(a)\\1~1x': backreferences are not supported");
  expect_refused(R"({"type": "object", "patternProperties": {"^a": {"type": "integer", "multipleOf": 0.5}}})",
                 "'#/patternProperties/^a/multipleOf'");
  // 9,001 automaton states a pattern: the third passes the grammar's budget for all of them.
  expect_refused(R"({"properties": {"a": {"pattern": "^(?:[a-z]{1000}){9}$"}, "b": {"pattern": "^(?:[a-z]{1000}){9}$"},
                     "c": {"pattern": "^(?:[a-z]{1000}){9}$"}}})",
                 "'#/properties/c/pattern': the pattern is too complex to enforce (its automaton passes 1998 states) "
                 "(the schema's patterns share one budget: 20000 automaton states, 1998 left");
  expect_refused(R"({"type": "number", "minimum": 1e20})", "no number of at most 15 digits");
  expect_refused(R"({"type": "number", "minimum": 0.5, "exclusiveMaximum": 0.5})", "no number of at most 15 digits");
  expect_refused(R"({"type": "number", "maximum": "1"})", "maximum must be a number");
  expect_refused(R"({"minimum": 0})", "bounds and multipleOf need a type");
  expect_refused(R"({"multipleOf": 3})", "bounds and multipleOf need a type");
  expect_refused(R"({"type": "number", "multipleOf": 0.01})", "'#/multipleOf': multipleOf 0.01 is not supported");
  expect_refused(R"({"type": "integer", "multipleOf": 0})", "multipleOf must be a number above 0");
  expect_refused(R"({"type": "integer", "multipleOf": "2"})", "multipleOf must be a number above 0");
  expect_refused(R"({"type": "integer", "multipleOf": 1e16})", "only a whole number up to 9e15");
  expect_refused(R"({"type": "integer", "minimum": 1, "maximum": 2, "multipleOf": 3})",
                 "no multiple of 3 of at most 15 digits lies between");
  expect_refused(R"({"type": "integer", "minimum": 3.5, "maximum": 3.9})", "no integer lies between");
  expect_refused(R"({"type": "integer", "maximum": 1e20})", "within");
  expect_refused(R"({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}})",
                 "beside properties only additionalProperties false");
  expect_refused(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'b' is required");
  expect_refused(R"({"$ref": "#/$defs/missing"})", "names nothing");
  expect_refused(R"({"$ref": "https://example.com/s.json"})", "only references into the same schema");
  expect_refused(R"({"type": "strin"})", "unknown type 'strin'");
  expect_refused(R"({"type": "array", "items": [{}], "prefixItems": [{}]})", "items as a list beside prefixItems");
  expect_refused(R"({"type": "array", "items": false, "minItems": 1})", "items false admits only the empty array");
  expect_refused(R"({"prefixItems": [{}], "items": false, "minItems": 2})", "minItems is more than");
  expect_refused(R"({"type": "array", "additionalItems": false})", "additionalItems needs items as a list");
  expect_refused(R"({"properties": {"a": {}}, "maxProperties": 1})", "supported on objects without properties");
  expect_refused(R"({"type": "object", "minProperties": 3, "maxProperties": 2})", "maxProperties is below");
  expect_refused(R"({"allOf": [{}, {}]})", "allOf is supported with one schema only");
  expect_refused(R"({"type": "string", "minLength": 3, "maxLength": 2})", "maxLength is below minLength");
  expect_refused(R"({"type": "string", "maxLength": -1})", "non-negative");
  expect_refused(R"(false)", "admits no value");
  expect_refused(R"({"$ref": "#"})", "reaches itself before any value");
  // Alternatives the matcher would follow at once, nested: 8 x 8 x 2.
  Json wide = Json::parse(R"({"anyOf": []})");
  for (int i = 0; i < 8; ++i) {
    Json inner = Json::parse(R"({"anyOf": []})");
    for (int j = 0; j < 8; ++j) inner["anyOf"].push_back(Json::parse(R"({"type": ["string", "null"]})"));
    wide["anyOf"].push_back(inner);
  }
  expect_refused(wide.dump(), "open 128 alternatives at once");
  expect_refused(R"(3)", "must be an object or a boolean");
}

TEST(JsonMatcher, DraftSevenTuplesAndMapsOfASchema) {
  // items as a list, then additionalItems: draft 7's form of prefixItems.
  const JsonGrammar pair = compile_json_schema(
      Json::parse(R"({"type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": false})"));
  EXPECT_TRUE(takes(pair, R"([1, "a"])"));
  EXPECT_FALSE(takes(pair, R"(["a", 1])"));
  EXPECT_FALSE(takes(pair, R"([1, "a", 2])"));
  const JsonGrammar counts =
      compile_json_schema(Json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"));
  EXPECT_TRUE(takes(counts, R"({"apples": 3, "pears": 0})"));
  EXPECT_FALSE(takes(counts, R"({"apples": "3"})"));
  const JsonGrammar one_or_two = compile_json_schema(Json::parse(R"({"additionalProperties": {"type": "null"},
                                                                      "minProperties": 1, "maxProperties": 2})"));
  EXPECT_FALSE(takes(one_or_two, "{}"));
  EXPECT_TRUE(takes(one_or_two, R"({"a": null})"));
  EXPECT_TRUE(takes(one_or_two, R"({"a": null, "b": null})"));
  EXPECT_FALSE(JsonMatcher(one_or_two).advance(std::string_view(R"({"a": null, "b": null,)")));
}

TEST(JsonMatcher, ANumbersBoundsHoldAtEachDigit) {
  const JsonGrammar third = compile_json_schema(Json::parse(R"({"type": "number", "minimum": 0.1, "maximum": 0.3})"));
  const auto prefix_taken = [&](const char* text) { return JsonMatcher(third).advance(std::string_view(text)); };
  EXPECT_TRUE(takes(third, "0.3"));
  EXPECT_TRUE(takes(third, "0.1"));        // read as the same double as the bound
  EXPECT_TRUE(takes(third, "0.2999"));
  EXPECT_FALSE(prefix_taken("0.31"));      // refused at its last digit
  EXPECT_FALSE(prefix_taken("0.0"));       // nothing from 0.0 on reaches 0.1
  EXPECT_FALSE(prefix_taken("1"));
  EXPECT_FALSE(prefix_taken("-"));
  EXPECT_FALSE(prefix_taken("0.2e"));      // no exponent under bounds
  EXPECT_FALSE(takes(third, "0.30000000000001"));
  EXPECT_FALSE(prefix_taken("0.1000000000000001"));  // past 15 digits
  const JsonGrammar open = compile_json_schema(
      Json::parse(R"({"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 2.5})"));
  EXPECT_FALSE(takes(open, "2.5"));
  EXPECT_TRUE(takes(open, "2.49"));
  EXPECT_TRUE(takes(open, "-0"));
  EXPECT_FALSE(JsonMatcher(open).advance(std::string_view("-3")));
}

// As the integers' test above: every pair of bounds near zero, inclusive
// or exclusive, each value from -2 to 2 in quarters against the double
// comparison a validator makes.
TEST(JsonMatcher, NumberBoundsNearZeroHoldForEveryValue) {
  const std::optional<double> edges[] = {std::nullopt, -1.0, -0.5, 0.0, 0.5, 1.0};
  for (const std::optional<double>& low : edges) {
    for (const std::optional<double>& high : edges) {
      if (low && high && *high < *low) continue;
      for (const bool exclusive : {false, true}) {
        Json schema = {{"type", "number"}};
        if (low) schema[exclusive ? "exclusiveMinimum" : "minimum"] = *low;
        if (high) schema[exclusive ? "exclusiveMaximum" : "maximum"] = *high;
        if (exclusive && low && high && *high <= *low) continue;
        const JsonGrammar grammar = compile_json_schema(schema);
        for (int q = -8; q <= 8; ++q) {
          const double v = q / 4.0;
          const bool within = (!low || (exclusive ? v > *low : v >= *low)) && (!high || (exclusive ? v < *high : v <= *high));
          const std::string text = Json(v).dump();
          EXPECT_EQ(takes(grammar, text), within) << schema.dump() << " " << text;
        }
      }
    }
  }
}

TEST(JsonGrammar, IgnoresAnnotations) {
  const JsonGrammar grammar = compile_json_schema(Json::parse(R"({
    "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "T", "description": "d",
    "type": "object", "properties": {"a": {"type": "boolean", "default": true, "examples": [false]}},
    "required": ["a"], "additionalProperties": false})"));
  EXPECT_TRUE(takes(grammar, R"({"a":true})"));
}

}  // namespace

}  // namespace tessera::text
