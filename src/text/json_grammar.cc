#include "text/json_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "text/json_string_formats.h"

namespace tessera::text {
namespace {

using Json = nlohmann::ordered_json;
using Kind = GrammarNode::Kind;

// Keywords that say nothing about what may be written.
const std::set<std::string> kAnnotations = {"title",      "description", "default",  "examples",  "$schema",
                                            "$id",        "$comment",    "deprecated", "readOnly", "writeOnly",
                                            "strict",     "$defs",       "definitions"};
// Keywords compiled below.
const std::set<std::string> kCompiled = {"type",  "enum",     "const",    "anyOf",    "oneOf",
                                         "allOf", "$ref",     "properties", "required", "additionalProperties",
                                         "items", "minItems", "maxItems", "minLength", "maxLength",
                                         "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                         "pattern", "format", "prefixItems", "additionalItems", "minProperties",
                                         "maxProperties", "uniqueItems", "propertyNames", "multipleOf",
                                         "patternProperties"};
const char* const kBounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

bool has_bounds(const nlohmann::ordered_json& schema) {
  return std::any_of(std::begin(kBounds), std::end(kBounds), [&](const char* key) { return schema.contains(key); });
}

std::string escape_pointer_token(const std::string& token) {
  std::string out;
  for (char c : token) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

GrammarNode node_of(Kind kind) {
  GrammarNode node;
  node.kind = kind;
  return node;
}

}  // namespace

class JsonGrammarBuilder::Compiler {
 public:
  Compiler() { add_fixed_nodes(); }

  JsonGrammar finish(int32_t root) {
    grammar_.root = root;
    return std::move(grammar_);
  }

  // A schema document: its $refs resolve inside it.
  int32_t document(const Json& document, const std::string& label) {
    root_ = &document;
    label_ = label;
    refs_.clear();
    const auto first = static_cast<int32_t>(grammar_.nodes.size());
    const int32_t root = compile(document, "#");
    std::vector<int64_t> leaves(grammar_.nodes.size(), -1);
    for (auto node = first; node < static_cast<int32_t>(grammar_.nodes.size()); ++node) {
      if (grammar_.nodes[node].kind == Kind::kAnyOf) count_leaves(node, leaves);
    }
    return root;
  }

  int32_t add(GrammarNode node) {
    grammar_.nodes.push_back(std::move(node));
    return static_cast<int32_t>(grammar_.nodes.size() - 1);
  }

  int32_t literals(const std::vector<Json>& values, const std::string& where) {
    if (values.size() > JsonGrammar::kMaxAlternatives) {
      fail(where, fmt::format("at most {} values are supported", JsonGrammar::kMaxAlternatives));
    }
    GrammarNode node = node_of(Kind::kLiterals);
    for (const Json& v : values) {
      std::string text = v.dump();
      if (std::find(node.literals.begin(), node.literals.end(), text) == node.literals.end()) {
        node.literals.push_back(std::move(text));
      }
    }
    return add(std::move(node));
  }

  // The node of `schema`, found at `where` (a JSON pointer, for errors).
  int32_t compile(const Json& schema, const std::string& where) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return JsonGrammar::kAnyValue;
      fail(where, "the schema false admits no value");
    }
    if (!schema.is_object()) fail(where, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items()) {
      if (!kAnnotations.contains(key) && !kCompiled.contains(key)) {
        fail(where, fmt::format("the keyword '{}' is not supported by structured output (supported: type, enum, "
                                "const, anyOf, oneOf, allOf of one schema, $ref, properties, required, "
                                "additionalProperties false or a schema without properties, items, prefixItems, "
                                "minItems, maxItems, minLength, maxLength, pattern, format, and a number's minimum, "
                                "maximum and whole multipleOf)",
                                key));
      }
    }
    if (const auto ref = schema.find("$ref"); ref != schema.end()) {
      if (schema.size() > 1 && (schema.contains("type") || schema.contains("properties"))) {
        fail(where, "$ref beside other constraints is not supported");
      }
      return reference(*ref, where);
    }
    if (const auto all = schema.find("allOf"); all != schema.end()) {
      if (!all->is_array() || all->size() != 1) fail(where + "/allOf", "allOf is supported with one schema only");
      return compile((*all)[0], where + "/allOf/0");
    }
    if (const auto c = schema.find("const"); c != schema.end()) return literals({*c}, where + "/const");
    if (const auto e = schema.find("enum"); e != schema.end()) {
      if (!e->is_array() || e->empty()) fail(where + "/enum", "enum must be a non-empty list");
      return literals(std::vector<Json>(e->begin(), e->end()), where + "/enum");
    }
    for (const char* word : {"anyOf", "oneOf"}) {
      if (const auto any = schema.find(word); any != schema.end()) {
        if (!any->is_array() || any->empty()) {
          fail(where + "/" + word, fmt::format("{} must be a non-empty list", word));
        }
        const int32_t node = add(node_of(Kind::kAnyOf));
        std::vector<int32_t> options;
        for (size_t i = 0; i < any->size(); ++i) {
          options.push_back(compile((*any)[i], fmt::format("{}/{}/{}", where, word, i)));
        }
        grammar_.nodes[node].options = std::move(options);
        return node;
      }
    }
    const auto type = schema.find("type");
    if (type == schema.end()) {
      for (const char* key : {"properties", "required", "additionalProperties", "minProperties", "maxProperties",
                              "propertyNames", "patternProperties"}) {
        if (schema.contains(key)) return typed(schema, "object", where);
      }
      for (const char* key : {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"}) {
        if (schema.contains(key)) return typed(schema, "array", where);
      }
      for (const char* key : {"minLength", "maxLength", "pattern", "format"}) {
        if (schema.contains(key)) return typed(schema, "string", where);
      }
      if (has_bounds(schema) || schema.contains("multipleOf")) {
        fail(where, "bounds and multipleOf need a type: \"integer\" or \"number\"");
      }
      return JsonGrammar::kAnyValue;
    }
    if (type->is_string()) return typed(schema, type->get<std::string>(), where);
    if (!type->is_array() || type->empty()) fail(where + "/type", "type must be a name or a non-empty list of names");
    const int32_t node = add(node_of(Kind::kAnyOf));
    std::vector<int32_t> options;
    for (const Json& name : *type) {
      if (!name.is_string()) fail(where + "/type", "type must be a name or a non-empty list of names");
      options.push_back(typed(schema, name.get<std::string>(), where));
    }
    grammar_.nodes[node].options = std::move(options);
    return node;
  }

 private:
  // The values an anyOf stands for through the anyOfs inside it (a $ref is
  // one): the matcher opens that many alternatives at once, so more than
  // JsonGrammar::kMaxAlternatives is refused, and so is a cycle of anyOfs
  // (a $ref that reaches itself before any byte), which admits no text.
  // leaves[n]: -1 not counted yet, -2 being counted.
  int64_t count_leaves(int32_t node, std::vector<int64_t>& leaves) {
    const GrammarNode& n = grammar_.nodes[node];
    if (n.kind != Kind::kAnyOf) return 1;
    if (leaves[node] == -2) fail("#", "a $ref reaches itself before any value is written: it admits no text");
    if (leaves[node] >= 0) return leaves[node];
    leaves[node] = -2;
    int64_t total = 0;
    for (int32_t option : n.options) total += count_leaves(option, leaves);
    if (total > static_cast<int64_t>(JsonGrammar::kMaxAlternatives)) {
      fail("#", fmt::format("its anyOf / oneOf / type lists open {} alternatives at once; at most {} are supported",
                            total, JsonGrammar::kMaxAlternatives));
    }
    leaves[node] = total;
    return total;
  }

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} at '{}': {}", label_, where, what));
  }

  void add_fixed_nodes() {
    add(node_of(Kind::kAny));
    GrammarNode object = node_of(Kind::kObject);
    object.free_keys = true;
    add(std::move(object));
    add(node_of(Kind::kArray));
    GrammarNode boolean = node_of(Kind::kLiterals);
    boolean.literals = {"true", "false"};
    add(std::move(boolean));
    GrammarNode null = node_of(Kind::kLiterals);
    null.literals = {"null"};
    add(std::move(null));
    add(node_of(Kind::kString));
  }

  int32_t reference(const Json& ref, const std::string& where) {
    if (!ref.is_string()) fail(where + "/$ref", "$ref must be a string");
    const std::string pointer = ref.get<std::string>();
    if (pointer != "#" && !pointer.starts_with("#/")) {
      fail(where + "/$ref",
           fmt::format("only references into the same schema (#/...) are supported, not '{}'", pointer));
    }
    if (const auto known = refs_.find(pointer); known != refs_.end()) return known->second;
    const Json* target = nullptr;
    try {
      target = &root_->at(Json::json_pointer(pointer.substr(1)));
    } catch (const std::exception&) {
      fail(where + "/$ref", fmt::format("'{}' names nothing in the schema", pointer));
    }
    // A placeholder first, so a recursive reference finds it: an anyOf of the
    // one compiled target.
    const int32_t node = add(node_of(Kind::kAnyOf));
    refs_[pointer] = node;
    const int32_t compiled = compile(*target, pointer);
    grammar_.nodes[node].options = {compiled};
    return node;
  }

  int64_t count(const Json& schema, const char* key, const std::string& where) {
    const auto it = schema.find(key);
    if (it == schema.end()) return -1;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      fail(where + "/" + key, fmt::format("{} must be a non-negative integer", key));
    }
    return it->get<int64_t>();
  }

  int32_t typed(const Json& schema, const std::string& type, const std::string& where) {
    if (type == "string") {
      GrammarNode node = node_of(Kind::kString);
      node.min_length = std::max<int64_t>(0, count(schema, "minLength", where));
      node.max_length = count(schema, "maxLength", where);
      if (node.max_length >= 0 && node.max_length < node.min_length) fail(where, "maxLength is below minLength");
      node.pattern = string_pattern(schema, node.min_length, node.max_length, where, node.counted_max_length);
      return add(std::move(node));
    }
    // A number that must be a multiple of a whole number is an integer.
    if (type == "number" && schema.contains("multipleOf")) return integer(schema, where);
    if (type == "number") {
      GrammarNode node = node_of(Kind::kNumber);
      node.number_bounds = number_bounds(schema, where);
      return add(std::move(node));
    }
    if (type == "integer") return integer(schema, where);
    if (type == "boolean") return JsonGrammar::kBoolean;
    if (type == "null") return JsonGrammar::kNull;
    if (type == "array") return array(schema, where);
    if (type == "object") return object(schema, where);
    fail(where + "/type", fmt::format("unknown type '{}'", type));
  }

  // The automaton of a string's pattern or format with its length bounds, or
  // -1 for neither. Where the automaton times every length up to max_length
  // would pass the budget, the automaton takes the minimum only and
  // `counted_max` is set to max_length, which the matcher then keeps by
  // counting (GrammarNode::counted_max_length).
  int32_t string_pattern(const Json& schema, int64_t min_length, int64_t max_length, const std::string& where,
                         int64_t& counted_max) {
    const auto pattern = schema.find("pattern");
    const auto format = schema.find("format");
    if (pattern == schema.end() && format == schema.end()) return -1;
    if (pattern != schema.end() && format != schema.end()) {
      fail(where, "pattern and format together are not supported: give one");
    }
    const bool is_format = format != schema.end();
    const std::string key = is_format ? "format" : "pattern";
    const Json& value = is_format ? *format : *pattern;
    if (!value.is_string()) fail(where + "/" + key, key + " must be a string");
    std::string text = value.get<std::string>();
    if (is_format) {
      std::optional<std::string> format_pattern = json_string_format_pattern(text, max_length);
      if (!format_pattern) {
        fail(where + "/format",
             fmt::format("format '{}' is not supported (supported: {})", text, json_string_format_names()));
      }
      // A format's own bound on its length (a host name's 253 characters).
      if (const int64_t most = json_string_format_max_length(text); most >= 0) {
        max_length = max_length >= 0 ? std::min(max_length, most) : most;
        if (max_length < min_length) fail(where, fmt::format("minLength is more than format '{}' allows", text));
      }
      text = std::move(*format_pattern);
    }
    return pattern_automaton(text, min_length, max_length, where + "/" + key, counted_max);
  }

  // The automaton of `text`, an ECMAScript pattern matched anywhere in a
  // string's characters, with the length bounds (string_pattern says how);
  // `where` is where the pattern is, for errors.
  int32_t pattern_automaton(const std::string& text, int64_t min_length, int64_t max_length, const std::string& where,
                            int64_t& counted_max) {
    const size_t left = JsonGrammar::kMaxPatternStates - pattern_states_;
    const size_t cap = std::min(RegexAutomaton::kMaxStates, left);
    const uint64_t work_cap = std::min(RegexAutomaton::kMaxWork, JsonGrammar::kMaxPatternWork - pattern_work_);
    try {
      std::shared_ptr<const RegexAutomaton> automaton = RegexAutomaton::compile(
          text, {RegexDialect::kEcmaScript, /*search=*/true, /*json_string=*/true, cap, work_cap});
      pattern_work_ += automaton->build_work();
      if (min_length > 0 || max_length >= 0) {
        try {
          automaton = automaton->with_length(min_length, max_length, cap);
        } catch (const Error&) {
          // Too many (state, length) pairs, as for a URI of up to 2,083
          // characters (Pydantic's HttpUrl): the maximum is counted instead.
          if (max_length < 0) throw;
          if (min_length > 0) automaton = automaton->with_length(min_length, -1, cap);
          if (automaton->chars_to_accept(automaton->start()) > max_length) {
            throw Error(ErrorKind::kInvalidArgument, "no match of the pattern is as short as maxLength");
          }
          counted_max = max_length;
        }
      }
      pattern_states_ += automaton->states();
      return add_pattern(std::move(automaton));
    } catch (const Error& e) {
      const std::string budget =
          cap < RegexAutomaton::kMaxStates || work_cap < RegexAutomaton::kMaxWork
              ? fmt::format(" (the schema's patterns share one budget: {} automaton states, {} left, and {} steps to "
                            "build them)",
                            JsonGrammar::kMaxPatternStates, left, JsonGrammar::kMaxPatternWork)
              : std::string();
      fail(where, e.message() + budget);
    }
  }

 public:
  int32_t add_pattern(std::shared_ptr<const RegexAutomaton> automaton) {
    grammar_.patterns.push_back(std::move(automaton));
    return static_cast<int32_t>(grammar_.patterns.size() - 1);
  }

 private:
  // A number's bounds, the tighter of minimum and exclusiveMinimum (of
  // maximum and exclusiveMaximum) where both are given.
  JsonNumberBounds number_bounds(const Json& schema, const std::string& where) {
    JsonNumberBounds b;
    for (const char* key : kBounds) {
      const auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (!it->is_number()) fail(where + "/" + key, fmt::format("{} must be a number", key));
      const double v = it->get<double>();
      if (!std::isfinite(v)) fail(where + "/" + key, fmt::format("{} must be finite", key));
      const bool lower = std::string_view(key).find("inimum") != std::string_view::npos;
      const bool exclusive = std::string_view(key).starts_with("exclusive");
      if (lower && (!b.has_minimum || v > b.minimum || (v == b.minimum && exclusive))) {
        b.has_minimum = true, b.minimum = v, b.exclusive_minimum = exclusive;
      }
      if (!lower && (!b.has_maximum || v < b.maximum || (v == b.maximum && exclusive))) {
        b.has_maximum = true, b.maximum = v, b.exclusive_maximum = exclusive;
      }
    }
    if (b.any() && !number_may_end_within(b, false, NumberPart::kSign, 0, 0, 0) &&
        !number_may_end_within(b, true, NumberPart::kSign, 0, 0, 0)) {
      fail(where, fmt::format("no number of at most {} digits, written without an exponent, lies within its bounds",
                              JsonNumberBounds::kMaxDigits));
    }
    return b;
  }

  // An integer and its bounds, made inclusive (the tighter of minimum and
  // exclusiveMinimum, of maximum and exclusiveMaximum).
  int32_t integer(const Json& schema, const std::string& where) {
    GrammarNode node = node_of(Kind::kInteger);
    for (const char* key : kBounds) {
      const auto it = schema.find(key);
      if (it == schema.end()) continue;
      if (!it->is_number()) fail(where + "/" + key, fmt::format("{} must be a number", key));
      const double v = it->get<double>();
      if (!(std::fabs(v) <= 9e15)) fail(where + "/" + key, fmt::format("{} must lie within ±9e15", key));
      const bool lower = std::string_view(key).find("inimum") != std::string_view::npos;
      const bool exclusive = std::string_view(key).starts_with("exclusive");
      if (lower) {
        const auto bound = static_cast<int64_t>(exclusive ? std::floor(v) + 1 : std::ceil(v));
        node.minimum = node.has_minimum ? std::max(node.minimum, bound) : bound;
        node.has_minimum = true;
      } else {
        const auto bound = static_cast<int64_t>(exclusive ? std::ceil(v) - 1 : std::floor(v));
        node.maximum = node.has_maximum ? std::min(node.maximum, bound) : bound;
        node.has_maximum = true;
      }
    }
    if (node.has_minimum && node.has_maximum && node.minimum > node.maximum) {
      fail(where, "no integer lies between its minimum and maximum");
    }
    node.multiple_of = whole_multiple(schema, where);
    if (node.multiple_of > 0 && !has_multiple_within(node)) {
      fail(where, fmt::format("no multiple of {} of at most {} digits lies between its minimum and maximum",
                              node.multiple_of, GrammarNode::kMultipleMaxDigits));
    }
    return add(std::move(node));
  }

  // multipleOf as GrammarNode::multiple_of: a whole number up to 9e15, or 0
  // where there is none (or it is 1, which asks no more than an integer).
  int64_t whole_multiple(const Json& schema, const std::string& where) {
    const auto it = schema.find("multipleOf");
    if (it == schema.end()) return 0;
    if (!it->is_number() || !(it->get<double>() > 0)) {
      fail(where + "/multipleOf", "multipleOf must be a number above 0");
    }
    const double v = it->get<double>();
    if (v != std::floor(v) || v > 9e15) {
      fail(where + "/multipleOf",
           fmt::format("multipleOf {} is not supported by structured output: only a whole number up to 9e15 is (a "
                       "validator divides in binary floating point, by which 0.07 is no multiple of 0.01)",
                       it->dump()));
    }
    return v == 1 ? 0 : static_cast<int64_t>(v);
  }

  // Whether some multiple of node.multiple_of lies within the node's bounds
  // and has at most kMultipleMaxDigits digits.
  static bool has_multiple_within(const GrammarNode& node) {
    constexpr int64_t kLargest = GrammarNode::kMultipleLargest;
    const int64_t low = node.has_minimum ? std::max(node.minimum, -kLargest) : -kLargest;
    const int64_t high = node.has_maximum ? std::min(node.maximum, kLargest) : kLargest;
    const int64_t m = node.multiple_of;
    // The least multiple at or above `low` (division truncates toward zero).
    const int64_t first = low >= 0 ? (low + m - 1) / m * m : -(-low / m * m);
    return first <= high;
  }

  int32_t array(const Json& schema, const std::string& where) {
    const int32_t node = add(node_of(Kind::kArray));
    const int64_t min_items = std::max<int64_t>(0, count(schema, "minItems", where));
    const int64_t max_items = count(schema, "maxItems", where);
    if (max_items >= 0 && max_items < min_items) fail(where, "maxItems is below minItems");
    // A tuple: 2020-12's prefixItems then items, or draft 7's items as a list then additionalItems.
    const auto prefix_items = schema.find("prefixItems");
    const auto items_it = schema.find("items");
    const bool draft7_tuple = items_it != schema.end() && items_it->is_array();
    if (prefix_items != schema.end() && draft7_tuple) fail(where + "/items", "items as a list beside prefixItems");
    const auto tuple = prefix_items != schema.end() ? prefix_items : draft7_tuple ? items_it : schema.end();
    const std::string tuple_key = prefix_items != schema.end() ? "prefixItems" : "items";
    std::vector<int32_t> prefix;
    if (tuple != schema.end()) {
      if (!tuple->is_array()) fail(where + "/" + tuple_key, tuple_key + " must be a list of schemas");
      for (size_t i = 0; i < tuple->size(); ++i) {
        prefix.push_back(compile((*tuple)[i], fmt::format("{}/{}/{}", where, tuple_key, i)));
      }
    } else if (schema.contains("additionalItems")) {
      fail(where + "/additionalItems", "additionalItems needs items as a list");
    }
    const auto rest = draft7_tuple ? schema.find("additionalItems") : items_it;  // the items after the tuple
    const std::string rest_key = draft7_tuple ? "additionalItems" : "items";
    int32_t items = -1;
    int64_t limit = max_items;
    if (rest != schema.end()) {
      if (rest->is_boolean() && !rest->get<bool>()) {
        if (tuple == schema.end()) fail(where + "/" + rest_key, "items false admits only the empty array: give maxItems 0");
        const auto size = static_cast<int64_t>(prefix.size());
        limit = limit >= 0 ? std::min(limit, size) : size;
      } else {
        items = compile(*rest, where + "/" + rest_key);
      }
    }
    const int32_t distinct = unique_items(schema, items, prefix.empty(), where);
    if (distinct >= 0) {
      const auto values = static_cast<int64_t>(grammar_.nodes[static_cast<size_t>(distinct)].literals.size());
      limit = limit >= 0 ? std::min(limit, values) : values;
    }
    if (limit >= 0 && limit < min_items) fail(where, "minItems is more than the items the array may hold");
    GrammarNode& n = grammar_.nodes[node];
    n.min_items = min_items;
    n.max_items = limit;
    n.items = items;
    n.prefix = std::move(prefix);
    n.distinct_items = distinct;
    return node;
  }

  // A map's propertyNames: the node its keys are written by (through $refs),
  // a string's (its pattern, format and lengths) or an enum's of strings
  // (Pydantic's dict of a Literal or an Enum); -1 (any string) without it.
  int32_t property_names(const Json& schema, const std::string& where) {
    const auto names = schema.find("propertyNames");
    if (names == schema.end()) return -1;
    int32_t node = compile(*names, where + "/propertyNames");
    while (grammar_.nodes[static_cast<size_t>(node)].kind == Kind::kAnyOf &&
           grammar_.nodes[static_cast<size_t>(node)].options.size() == 1) {
      node = grammar_.nodes[static_cast<size_t>(node)].options[0];  // a $ref's placeholder
    }
    const GrammarNode& n = grammar_.nodes[static_cast<size_t>(node)];
    const bool strings = n.kind == Kind::kLiterals && std::all_of(n.literals.begin(), n.literals.end(), [](const auto& t) {
      return t.starts_with('"');
    });
    if (n.kind != Kind::kString && !strings) {
      fail(where + "/propertyNames", "propertyNames must be a string's schema or an enum of strings");
    }
    return node;
  }

  // A map's patternProperties of one pattern (Pydantic's dict of a
  // constr(pattern=...)): the node of its keys, a string matching the
  // pattern anywhere, and of its values. Under several patterns a key
  // matching two would owe both values, which the matcher does not keep.
  std::pair<int32_t, int32_t> pattern_properties(const Json& patterned, const std::string& where) {
    if (!patterned.is_object() || patterned.size() != 1) {
      fail(where + "/patternProperties",
           "patternProperties is supported with one pattern (a map whose keys have a pattern)");
    }
    const std::string& pattern = patterned.begin().key();
    const std::string at = where + "/patternProperties/" + escape_pointer_token(pattern);
    GrammarNode keys = node_of(Kind::kString);
    keys.pattern = pattern_automaton(pattern, 0, -1, at, keys.counted_max_length);
    const int32_t key_node = add(std::move(keys));
    return {key_node, compile(patterned.begin().value(), at)};
  }

  // uniqueItems true: the kLiterals node the items are (through $refs), so
  // that the matcher can take each of its values once (Pydantic's set of an
  // Enum or a Literal); -1 for false or absent. Other items, or a tuple, are
  // refused: telling any two values apart is not what a matcher of bytes
  // keeps.
  int32_t unique_items(const Json& schema, int32_t items, bool plain, const std::string& where) {
    const auto unique = schema.find("uniqueItems");
    if (unique == schema.end()) return -1;
    if (!unique->is_boolean()) fail(where + "/uniqueItems", "uniqueItems must be true or false");
    if (!unique->get<bool>()) return -1;
    int32_t node = items;
    while (node >= 0 && grammar_.nodes[static_cast<size_t>(node)].kind == Kind::kAnyOf &&
           grammar_.nodes[static_cast<size_t>(node)].options.size() == 1) {
      node = grammar_.nodes[static_cast<size_t>(node)].options[0];  // a $ref's placeholder
    }
    if (!plain || node < 0 || grammar_.nodes[static_cast<size_t>(node)].kind != Kind::kLiterals) {
      fail(where + "/uniqueItems",
           "uniqueItems is supported for items of an enum, const or boolean (a set of an Enum or a Literal), "
           "without prefixItems");
    }
    // Values written differently that JSON Schema holds equal (1 and 1.0,
    // objects in another key order) would be two values to the matcher.
    const std::vector<std::string>& texts = grammar_.nodes[static_cast<size_t>(node)].literals;
    std::vector<nlohmann::json> values;
    for (const std::string& text : texts) values.push_back(nlohmann::json::parse(text));
    for (size_t i = 0; i < values.size(); ++i) {
      for (size_t j = i + 1; j < values.size(); ++j) {
        if (values[i] == values[j]) {
          fail(where + "/uniqueItems", fmt::format("the items' values {} and {} are equal under uniqueItems: give "
                                                   "one of them", texts[i], texts[j]));
        }
      }
    }
    return node;
  }

  int32_t object(const Json& schema, const std::string& where) {
    const int32_t node = add(node_of(Kind::kObject));
    bool additional = true;
    int32_t additional_node = -1;  // the free keys' values: any value
    const auto extra = schema.find("additionalProperties");
    if (extra != schema.end()) {
      if (extra->is_boolean() && !extra->get<bool>()) {
        additional = false;
      } else if (schema.contains("properties")) {
        fail(where + "/additionalProperties",
             "beside properties only additionalProperties false is supported (structured output writes the listed "
             "properties)");
      } else if (!extra->is_boolean()) {
        additional_node = compile(*extra, where + "/additionalProperties");
      }
    }
    std::set<std::string> required;
    if (const auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) fail(where + "/required", "required must be a list of names");
      for (const Json& name : *it) {
        if (!name.is_string()) fail(where + "/required", "required must be a list of names");
        required.insert(name.get<std::string>());
      }
    }
    const auto props = schema.find("properties");
    const int64_t min_properties = std::max<int64_t>(0, count(schema, "minProperties", where));
    const int64_t max_properties = count(schema, "maxProperties", where);
    if (props == schema.end()) {
      if (!required.empty()) fail(where + "/required", "required names properties the schema does not list");
      if (max_properties >= 0 && max_properties < min_properties) fail(where, "maxProperties is below minProperties");
      int32_t keys = property_names(schema, where);
      if (schema.contains("patternProperties")) {
        // The pattern's keys only, with its values: what other keys
        // additionalProperties would take need never be written.
        if (keys >= 0) fail(where, "patternProperties beside propertyNames is not supported: give one");
        std::tie(keys, additional_node) = pattern_properties(*schema.find("patternProperties"), where);
        additional = true;
      }
      if (!additional && min_properties > 0) fail(where, "minProperties beside additionalProperties false admits nothing");
      GrammarNode& n = grammar_.nodes[node];
      n.free_keys = additional;
      n.additional = additional_node;
      n.min_properties = min_properties;
      n.max_properties = max_properties;
      n.keys = keys;
      return node;
    }
    for (const char* key : {"minProperties", "maxProperties", "propertyNames", "patternProperties"}) {
      if (schema.contains(key)) {
        fail(where, "minProperties, maxProperties, propertyNames and patternProperties are supported on objects "
                    "without properties (maps)");
      }
    }
    if (!props->is_object()) fail(where + "/properties", "properties must be an object");
    if (props->size() > JsonGrammar::kMaxAlternatives) {
      fail(where + "/properties", fmt::format("at most {} properties are supported", JsonGrammar::kMaxAlternatives));
    }
    std::vector<GrammarNode::Property> properties;
    for (const auto& [name, sub] : props->items()) {
      GrammarNode::Property p;
      p.key = Json(name).dump().substr(1);
      p.required = required.erase(name) > 0;
      p.value = compile(sub, where + "/properties/" + escape_pointer_token(name));
      properties.push_back(std::move(p));
    }
    if (!required.empty()) {
      fail(where + "/required", fmt::format("'{}' is required but not among the properties", *required.begin()));
    }
    grammar_.nodes[node].properties = std::move(properties);
    return node;
  }

  const Json* root_ = nullptr;
  std::string label_;
  size_t pattern_states_ = 0;  // the automata's states so far, against JsonGrammar::kMaxPatternStates
  uint64_t pattern_work_ = 0;  // and their construction's steps, against JsonGrammar::kMaxPatternWork
  JsonGrammar grammar_;
  std::map<std::string, int32_t> refs_;
};

JsonGrammarBuilder::JsonGrammarBuilder() : compiler_(std::make_unique<Compiler>()) {}
JsonGrammarBuilder::~JsonGrammarBuilder() = default;

int32_t JsonGrammarBuilder::schema(const nlohmann::ordered_json& document, const std::string& label) {
  return compiler_->document(document, label);
}

int32_t JsonGrammarBuilder::raw(std::string text) {
  TESSERA_CHECK(!text.empty());
  GrammarNode node = node_of(Kind::kLiterals);
  node.literals = {std::move(text)};
  node.raw = true;
  return compiler_->add(std::move(node));
}

int32_t JsonGrammarBuilder::regex(std::string_view pattern, RegexDialect dialect) {
  GrammarNode node = node_of(Kind::kRegex);
  node.raw = true;
  node.pattern = compiler_->add_pattern(RegexAutomaton::compile(pattern, {dialect, false, false}));
  return compiler_->add(std::move(node));
}

int32_t JsonGrammarBuilder::sequence(std::vector<int32_t> parts) {
  TESSERA_CHECK(!parts.empty());
  GrammarNode node = node_of(Kind::kSequence);
  node.options = std::move(parts);
  return compiler_->add(std::move(node));
}

int32_t JsonGrammarBuilder::any_of(std::vector<int32_t> options) {
  TESSERA_CHECK(!options.empty());
  GrammarNode node = node_of(Kind::kAnyOf);
  node.options = std::move(options);
  return compiler_->add(std::move(node));
}

int32_t JsonGrammarBuilder::object(const std::vector<std::pair<std::string, int32_t>>& properties) {
  TESSERA_CHECK(properties.size() <= JsonGrammar::kMaxAlternatives);
  GrammarNode node = node_of(Kind::kObject);
  for (const auto& [name, value] : properties) node.properties.push_back({Json(name).dump().substr(1), value, true});
  return compiler_->add(std::move(node));
}

int32_t JsonGrammarBuilder::constant(const nlohmann::ordered_json& value) { return compiler_->literals({value}, "#"); }

JsonGrammar JsonGrammarBuilder::finish(int32_t root) { return compiler_->finish(root); }

JsonGrammar any_json_object() {
  JsonGrammarBuilder builder;
  return builder.finish(JsonGrammar::kAnyObject);
}

JsonGrammar compile_json_schema(const nlohmann::ordered_json& schema, const std::string& label) {
  JsonGrammarBuilder builder;
  const int32_t root = builder.schema(schema, label);
  return builder.finish(root);
}

}  // namespace tessera::text
