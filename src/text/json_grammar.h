// JsonGrammar: what a structured-output request lets the model write, as a
// small graph of value kinds compiled from a JSON Schema (OpenAI's
// response_format json_schema) or standing for "any JSON object"
// (response_format json_object). JsonMatcher (json_matcher.h) runs it over
// bytes.
//
// The schema subset, and what each keyword makes the model write:
//   type (a name or a list of names), enum, const, anyOf / oneOf (oneOf's
//   exclusivity is not enforced), allOf of one schema, $ref into the same
//   document (#, #/$defs/..., #/definitions/...; recursion allowed);
//   objects: properties (written in the order the schema lists them; required
//   ones always, optional ones may be left out), required, additionalProperties
//   false (also when absent, as OpenAI's strict mode requires: only the listed
//   properties are written); an object with no properties takes any keys,
//   their values any value or additionalProperties' schema (a map), as many
//   as minProperties and maxProperties allow, none with additionalProperties
//   false, the keys held to propertyNames (a string's schema or an enum of
//   strings) or to patternProperties of one pattern (only keys matching it
//   are written, with its values: a dict of a constr(pattern=...));
//   arrays: items, prefixItems (a tuple: each of the first items its own
//   schema, then items' or none with items false; draft 7's items as a
//   list and additionalItems too), minItems, maxItems, uniqueItems over
//   items of an enum, const or boolean; strings: minLength, maxLength (code
//   points; an escape counts as one), pattern (an ECMAScript regular
//   expression, matched anywhere unless ^ / $ anchor it; regex_syntax.h says
//   what is taken), format (json_string_formats.h: date, time, date-time,
//   duration, uuid, ipv4, ipv6, email, hostname, uri, and Pydantic's own
//   such as uuid4, ipvanyaddress, password, binary; one of pattern and
//   format; a maxLength beside one that the automaton cannot be multiplied
//   by is counted, as GrammarNode::counted_max_length says); integers: minimum,
//   maximum, exclusiveMinimum, exclusiveMaximum (within ±9e15), multipleOf
//   (a whole number up to 9e15; the integer is then written in at most 15
//   digits); numbers: the same bounds (json_number_bounds.h: such a number is
//   written without an exponent, in at most 15 digits), and a whole
//   multipleOf, with which the number is written as an integer (a fractional
//   multipleOf is refused: the reference divides in binary floating point,
//   so that 0.07 is no multiple of 0.01). A schema without type takes it from
//   these keywords (an object's, an array's or a string's), else any value.
//   Annotations (title, description, default, examples, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly, strict) are ignored.
// Anything else (uniqueItems over other items, several patternProperties,
// ...) is refused with Error(kInvalidArgument) naming the keyword and where it
// is, rather than quietly not enforced.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/json_number_bounds.h"
#include "text/regex_automaton.h"

namespace tessera::text {

struct GrammarNode {
  enum class Kind : uint8_t {
    kAny,       // any JSON value
    kObject,    // properties, or free keys with any values
    kArray,     // items (node, or -1: any value), counts
    kString,    // lengths
    kNumber,    // any JSON number
    kInteger,   // a number without fraction or exponent
    kLiterals,  // one of `literals` (JSON texts): enum, const, true/false, null; or raw text
    kAnyOf,     // a value of one of `options`
    kSequence,  // the values of `options`, one after another (markup around a JSON value)
    kRegex,     // raw text that `pattern` matches (guided_regex)
  };
  struct Property {
    std::string key;  // the name as JSON text after its opening quote, closing quote included
    int32_t value = 0;
    bool required = false;
  };
  Kind kind = Kind::kAny;
  std::vector<Property> properties;  // kObject, at most kMaxAlternatives
  bool free_keys = false;            // kObject: any keys, each a value of `additional`
  int32_t additional = -1;           // kObject with free keys: their values' node (-1: any value)
  // kObject with free keys: their node, a kString or a kLiterals of strings
  // (propertyNames); -1: any string.
  int32_t keys = -1;
  int64_t min_properties = 0, max_properties = -1;  // kObject with free keys: how many; -1: no bound
  int32_t items = -1;                // kArray: the items after `prefix` (-1: any value)
  // kArray with uniqueItems: the kLiterals node its items are, each of whose
  // values it takes once (max_items at most their number); -1 otherwise.
  int32_t distinct_items = -1;
  std::vector<int32_t> prefix;       // kArray: the first items' nodes, one each (a tuple)
  int64_t min_items = 0, max_items = -1;    // kArray; -1: no bound
  int64_t min_length = 0, max_length = -1;  // kString; -1: no bound
  // kString: what its characters (escapes decoded) must match, lengths
  // included; kRegex: the text's. An index into JsonGrammar::patterns, or -1.
  int32_t pattern = -1;
  // kString with a pattern whose automaton could not be multiplied by every
  // length up to maxLength: the maxLength, kept by the matcher counting
  // characters against the automaton's chars_to_accept; -1 otherwise.
  int64_t counted_max_length = -1;
  bool has_minimum = false, has_maximum = false;  // kInteger: inclusive bounds
  int64_t minimum = 0, maximum = 0;
  // kInteger: the value must be a multiple of it (multipleOf, at least 2), and
  // is then written in at most kMultipleMaxDigits digits; 0 otherwise.
  int64_t multiple_of = 0;
  static constexpr int kMultipleMaxDigits = 15;
  static constexpr int64_t kMultipleLargest = 999'999'999'999'999;  // kMultipleMaxDigits nines
  JsonNumberBounds number_bounds;                 // kNumber
  std::vector<std::string> literals;        // kLiterals, at most kMaxAlternatives
  bool raw = false;                         // kLiterals: text with no whitespace before it
  std::vector<int32_t> options;             // kAnyOf; kSequence: the parts, at least one
};

struct JsonGrammar {
  // Alternatives the matcher tracks in one 64-bit word: properties of an
  // object, values of an enum.
  static constexpr size_t kMaxAlternatives = 64;
  // Automaton states of all of a grammar's patterns together (each state a
  // row of up to 256 transitions): what one request may make the server hold.
  static constexpr size_t kMaxPatternStates = 20000;
  // And the steps of building them (RegexOptions::max_work): about 0.2 s.
  static constexpr uint64_t kMaxPatternWork = 8000000;
  // Nodes every grammar has, at these indices.
  static constexpr int32_t kAnyValue = 0, kAnyObject = 1, kAnyArray = 2, kBoolean = 3, kNull = 4, kAnyString = 5;
  // Bytes a run of whitespace between JSON tokens may take: enough for any
  // pretty-printing, few enough that a model cannot ramble in it.
  static constexpr int kMaxWhitespace = 20;

  std::vector<GrammarNode> nodes;
  std::vector<std::shared_ptr<const RegexAutomaton>> patterns;
  int32_t root = kAnyValue;
  // The run's cap for this grammar: 0 writes the JSON compactly (vLLM's
  // disable_any_whitespace).
  int max_whitespace = kMaxWhitespace;
};

// response_format {"type": "json_object"}: one JSON object, any content.
JsonGrammar any_json_object();

// response_format {"type": "json_schema"}: `schema` compiled. Throws
// Error(kInvalidArgument) naming the keyword and its JSON pointer for what
// the subset above does not cover or a malformed value.
// `label` names the schema in errors.
JsonGrammar compile_json_schema(const nlohmann::ordered_json& schema,
                                const std::string& label = "response_format's schema");

// A grammar made of parts: schema documents (each with its own $refs), raw
// text, sequences and alternatives, e.g. a tool call's markup around the
// JSON of one of several functions.
class JsonGrammarBuilder {
 public:
  JsonGrammarBuilder();
  ~JsonGrammarBuilder();

  // The node of a JSON Schema document; errors name it as `label`
  // ("response_format's schema at '#/...': ...").
  int32_t schema(const nlohmann::ordered_json& document, const std::string& label);
  int32_t raw(std::string text);                   // exactly these bytes
  // Text that `pattern` matches whole: vLLM's guided_regex (Python's
  // syntax), LMDeploy's regex_schema (ECMAScript's, as its xgrammar reads
  // it). Throws Error(kInvalidArgument) as RegexAutomaton::compile does.
  int32_t regex(std::string_view pattern, RegexDialect dialect = RegexDialect::kPython);
  int32_t sequence(std::vector<int32_t> parts);    // one after another
  int32_t any_of(std::vector<int32_t> options);
  // An object of exactly these properties, in this order, all required.
  int32_t object(const std::vector<std::pair<std::string, int32_t>>& properties);
  int32_t constant(const nlohmann::ordered_json& value);  // this JSON value, compactly written
  JsonGrammar finish(int32_t root);

 private:
  class Compiler;
  std::unique_ptr<Compiler> compiler_;
};

}  // namespace tessera::text
