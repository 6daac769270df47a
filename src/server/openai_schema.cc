#include "server/openai_schema.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "server/api_error.h"

namespace tessera::server {

namespace {

using Json = nlohmann::ordered_json;

// Arrays and objects nested deeper than this are refused before parsing: copying or walking a value
// recurses, and a body of a million '[' would overflow the stack.
constexpr int kMaxJsonDepth = 128;

void check_nesting(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        throw bad_request(fmt::format("the body nests arrays and objects deeper than {} levels", kMaxJsonDepth),
                          std::nullopt, "invalid_json");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

Json parse_object(std::string_view body) {
  check_nesting(body);
  Json json;
  try {
    json = Json::parse(body);
  } catch (const Json::exception& e) {  // parse errors, and numbers too large for a double (1e999)
    throw bad_request(fmt::format("the body is not valid JSON: {}", e.what()), std::nullopt, "invalid_json");
  }
  if (!json.is_object()) throw bad_request(fmt::format("the body must be a JSON object, not {}", json.type_name()));
  return json;
}

// Typed, range-checked reads of an object's fields; absent and null are the same.
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}

  const Json* find(const std::string& name) const {
    auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<bool> boolean(const std::string& name) const {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw wrong_type(name, "a boolean", *v);
    return v->get<bool>();
  }

  std::optional<int64_t> integer(const std::string& name, int64_t lo, int64_t hi) const {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) throw wrong_type(name, "an integer", *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) throw out_of_range(name, lo, hi, v->dump());
    int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) throw out_of_range(name, lo, hi, v->dump());
    return x;
  }

  std::optional<double> number(const std::string& name, double lo, double hi) const {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw wrong_type(name, "a number", *v);
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) throw out_of_range(name, lo, hi, v->dump());
    return x;
  }

  std::optional<std::string> string(const std::string& name) const {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw wrong_type(name, "a string", *v);
    return v->get<std::string>();
  }

  static ApiError wrong_type(const std::string& name, const char* expected, const Json& got) {
    return bad_request(fmt::format("'{}' must be {}, not {}", name, expected, got.type_name()), name, "invalid_type");
  }
  template <typename T>
  static ApiError out_of_range(const std::string& name, T lo, T hi, const std::string& got) {
    return bad_request(fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, got), name,
                       "invalid_value");
  }

 private:
  const Json& object_;
};

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

std::string required_model(const Fields& f) {
  std::optional<std::string> model = f.string("model");
  if (!model) throw bad_request("'model' is required", "model", "missing_required_parameter");
  return *model;
}

std::vector<int32_t> token_ids(const Json& array, const std::string& name) {
  std::vector<int32_t> ids;
  for (const Json& v : array) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxTokenId) {
      throw bad_request(fmt::format("'{}' must hold token ids (non-negative integers), found {}", name, v.dump()),
                        name, "invalid_value");
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100], ...}, at most 1024 entries.
void parse_logit_bias(const Json& bias, engine::SamplingParams& sampling) {
  if (!bias.is_object()) throw Fields::wrong_type("logit_bias", "an object of token ids to biases", bias);
  if (bias.size() > 1024) throw bad_request("'logit_bias' holds more than 1024 tokens", "logit_bias", "invalid_value");
  for (const auto& [key, value] : bias.items()) {
    int64_t id = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (error != std::errc() || end != key.data() + key.size() || id < 0 || id > kMaxTokenId) {
      throw bad_request(fmt::format("'logit_bias' keys must be token ids (non-negative integers as strings), found "
                                    "\"{}\"",
                                    key),
                        "logit_bias", "invalid_value");
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100.0 ||
        value.get<double>() > 100.0) {
      throw bad_request(fmt::format("'logit_bias' of token {} must be a number in [-100, 100], found {}", id,
                                    value.dump()),
                        "logit_bias", "invalid_value");
    }
    sampling.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(value.get<double>()));
  }
}

// A grammar of text that `pattern` (a string) matches whole; errors name `param`.
std::shared_ptr<const text::JsonGrammar> whole_match(const Json& pattern, text::RegexDialect dialect,
                                                     const std::string& param) {
  if (!pattern.is_string()) throw Fields::wrong_type(param, "a string", pattern);
  try {
    text::JsonGrammarBuilder builder;
    const int32_t root = builder.regex(pattern.get<std::string>(), dialect);
    return std::make_shared<const text::JsonGrammar>(builder.finish(root));
  } catch (const Error& e) {
    throw bad_request(param + ": " + e.message(), param, "unsupported_value");
  }
}

// The fields chat and text completions share. `logprobs` differs between the
// two APIs and is read by the callers.
// OpenAI's response_format: {"type": "text"} (free text: null), {"type":
// "json_object"}, or {"type": "json_schema", "json_schema": {"name", "schema",
// "strict"}}; and LMDeploy's {"type": "regex_schema", "regex_schema":
// PATTERN} (the whole answer matches it, ECMAScript's syntax as LMDeploy's
// xgrammar reads it). The schema's errors name the keyword (text/json_grammar.h).
std::shared_ptr<const text::JsonGrammar> parse_response_format(const Json& format) {
  if (!format.is_object()) throw Fields::wrong_type("response_format", "an object", format);
  const std::string type = Fields(format).string("type").value_or("text");
  if (type == "text") return nullptr;
  if (type == "json_object") return std::make_shared<const text::JsonGrammar>(text::any_json_object());
  if (type == "regex_schema") {
    const Json* pattern = Fields(format).find("regex_schema");
    if (pattern == nullptr || !pattern->is_string()) {
      throw bad_request("'response_format.regex_schema' must be the regular expression, a string",
                        "response_format.regex_schema", "missing_required_parameter");
    }
    return whole_match(*pattern, text::RegexDialect::kEcmaScript, "response_format.regex_schema");
  }
  if (type != "json_schema") {
    throw bad_request(fmt::format("'response_format.type' must be \"text\", \"json_object\", \"json_schema\" or "
                                  "\"regex_schema\", not \"{}\"",
                                  type),
                      "response_format.type", "unsupported_value");
  }
  const Json* spec = Fields(format).find("json_schema");
  if (spec == nullptr || !spec->is_object()) {
    throw bad_request("'response_format.json_schema' must be an object with the schema under \"schema\"",
                      "response_format.json_schema", "missing_required_parameter");
  }
  const Json* schema = Fields(*spec).find("schema");
  if (schema == nullptr) {
    throw bad_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema",
                      "missing_required_parameter");
  }
  try {
    return std::make_shared<const text::JsonGrammar>(text::compile_json_schema(*schema));
  } catch (const Error& e) {
    throw bad_request(e.message(), "response_format.json_schema.schema", "unsupported_value");
  }
}

// vLLM's ways of asking for a structured answer: a JSON Schema (or its text),
// a regular expression the whole answer matches, or one of some strings;
// `names` are the request's fields (their errors name them). compact: the
// JSON without whitespace between its tokens.
struct GuidedFields {
  const Json* json = nullptr;
  const Json* regex = nullptr;
  const Json* choice = nullptr;
  std::string json_name, regex_name, choice_name;
  text::RegexDialect dialect = text::RegexDialect::kPython;
  bool compact = false;
};

std::shared_ptr<const text::JsonGrammar> guided_grammar(const GuidedFields& g) {
  const auto given = [](const Json* v) { return v != nullptr && !v->is_null(); };
  if (given(g.json) + given(g.choice) + given(g.regex) > 1) {
    throw bad_request(fmt::format("give one of '{}', '{}' and '{}'", g.json_name, g.regex_name, g.choice_name),
                      g.choice_name, "invalid_value");
  }
  if (given(g.regex)) return whole_match(*g.regex, g.dialect, g.regex_name);
  if (given(g.json)) {
    Json document = *g.json;
    if (g.json->is_string()) {
      document = Json::parse(g.json->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (document.is_discarded()) {
        throw bad_request(fmt::format("'{}' as a string must hold a JSON Schema", g.json_name), g.json_name,
                          "invalid_value");
      }
    }
    try {
      text::JsonGrammar grammar = text::compile_json_schema(document, g.json_name);
      if (g.compact) grammar.max_whitespace = 0;
      return std::make_shared<const text::JsonGrammar>(std::move(grammar));
    } catch (const Error& e) {
      throw bad_request(e.message(), g.json_name, "unsupported_value");
    }
  }
  if (!given(g.choice)) return nullptr;
  if (!g.choice->is_array() || g.choice->empty() || g.choice->size() > text::JsonGrammar::kMaxAlternatives) {
    throw bad_request(fmt::format("'{}' must be a list of 1 to {} non-empty strings", g.choice_name,
                                  text::JsonGrammar::kMaxAlternatives),
                      g.choice_name, "invalid_value");
  }
  text::JsonGrammarBuilder builder;
  std::vector<int32_t> options;
  for (const Json& c : *g.choice) {
    if (!c.is_string() || c.get_ref<const std::string&>().empty()) {
      throw bad_request(fmt::format("'{}' must be a list of non-empty strings", g.choice_name), g.choice_name,
                        "invalid_value");
    }
    options.push_back(builder.raw(c.get<std::string>()));
  }
  return std::make_shared<const text::JsonGrammar>(builder.finish(builder.any_of(std::move(options))));
}

// vLLM's guided decoding fields: guided_json, guided_regex (Python's syntax,
// as vLLM's outlines read it) and guided_choice; null when none is given.
// guided_grammar is refused.
std::shared_ptr<const text::JsonGrammar> parse_guided_decoding(const Fields& f) {
  if (const Json* v = f.find("guided_grammar"); v && !v->is_null()) {
    throw bad_request("'guided_grammar' is not supported: give 'guided_json', 'guided_regex', 'guided_choice' or a "
                      "'response_format' with a JSON Schema",
                      "guided_grammar", "unsupported_value");
  }
  GuidedFields g{f.find("guided_json"), f.find("guided_regex"), f.find("guided_choice"),
                 "guided_json",        "guided_regex",        "guided_choice"};
  return guided_grammar(g);
}

// vLLM's structured_outputs, which replaced its guided_* fields: {"json":
// a schema or its text, "regex": a pattern (ECMAScript's syntax, as its
// xgrammar reads it), "choice": [strings], "json_object": true}, one of
// them; "disable_any_whitespace": true writes the JSON compactly.
// "disable_fallback" and "disable_additional_properties" are taken as they
// are (there is no other backend to fall back to, and a schema's objects
// never get properties it does not list). A grammar, a structural tag or a
// whitespace pattern is refused, as is a key vLLM does not know.
std::shared_ptr<const text::JsonGrammar> parse_structured_outputs(const Json& spec) {
  constexpr const char* kName = "structured_outputs";
  if (!spec.is_object()) throw Fields::wrong_type(kName, "an object", spec);
  const auto param = [&](const std::string& key) { return std::string(kName) + "." + key; };
  for (const auto& [key, value] : spec.items()) {
    if (value.is_null()) continue;
    if (key == "grammar" || key == "structural_tag" || key == "whitespace_pattern") {
      throw bad_request(fmt::format("'{}' is not supported: give 'json', 'regex', 'choice' or 'json_object'",
                                    param(key)),
                        param(key), "unsupported_value");
    }
    if (key == "json_object" || key == "disable_fallback" || key == "disable_any_whitespace" ||
        key == "disable_additional_properties") {
      if (!value.is_boolean()) throw Fields::wrong_type(param(key), "a boolean", value);
    } else if (key != "json" && key != "regex" && key != "choice") {
      throw bad_request(fmt::format("'{}' is not a field of structured_outputs (json, regex, choice, json_object, "
                                    "disable_any_whitespace, disable_fallback, disable_additional_properties)",
                                    param(key)),
                        param(key), "invalid_value");
    }
  }
  const Fields f(spec);
  GuidedFields g{f.find("json"), f.find("regex"), f.find("choice"), param("json"), param("regex"), param("choice"),
                 text::RegexDialect::kEcmaScript, f.boolean("disable_any_whitespace").value_or(false)};
  if (f.boolean("json_object").value_or(false)) {
    if (g.json || g.regex || g.choice) {
      throw bad_request("give one of 'structured_outputs.json', 'regex', 'choice' and 'json_object'",
                        param("json_object"), "invalid_value");
    }
    text::JsonGrammar grammar = text::any_json_object();
    if (g.compact) grammar.max_whitespace = 0;
    return std::make_shared<const text::JsonGrammar>(std::move(grammar));
  }
  std::shared_ptr<const text::JsonGrammar> grammar = guided_grammar(g);
  if (!grammar) {
    throw bad_request("'structured_outputs' names no structure: give 'json', 'regex', 'choice' or 'json_object'",
                      kName, "missing_required_parameter");
  }
  return grammar;
}

GenerationOptions parse_generation_options(const Json& body, bool chat) {
  Fields f(body);
  GenerationOptions o;
  if (chat) {
    o.max_tokens = f.integer("max_completion_tokens", 1, kMaxInt);
    if (!o.max_tokens) o.max_tokens = f.integer("max_tokens", 1, kMaxInt);
  } else {
    // 0 only with echo (checked by the caller): the prompt scored, nothing generated.
    o.max_tokens = f.integer("max_tokens", 0, kMaxInt).value_or(16);
  }
  o.min_tokens = f.integer("min_tokens", 0, kMaxInt).value_or(0);
  engine::SamplingParams& s = o.sampling;
  s.temperature = static_cast<float>(f.number("temperature", 0.0, 2.0).value_or(0.7));
  s.top_p = static_cast<float>(f.number("top_p", 0.0, 1.0).value_or(1.0));
  if (s.top_p <= 0.0f) throw bad_request("'top_p' must be greater than 0 and at most 1", "top_p", "invalid_value");
  const int64_t top_k = f.integer("top_k", -1, std::numeric_limits<int32_t>::max()).value_or(40);
  s.top_k = top_k <= 0 ? 0 : static_cast<int32_t>(top_k);
  s.min_p = static_cast<float>(f.number("min_p", 0.0, 1.0).value_or(0.0));
  s.repetition_penalty = static_cast<float>(f.number("repetition_penalty", 0.0, 1e4).value_or(1.0));
  if (s.repetition_penalty <= 0.0f) {
    throw bad_request("'repetition_penalty' must be greater than 0", "repetition_penalty", "invalid_value");
  }
  s.presence_penalty = static_cast<float>(f.number("presence_penalty", -2.0, 2.0).value_or(0.0));
  s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2.0, 2.0).value_or(0.0));
  if (std::optional<int64_t> seed = f.integer("seed", std::numeric_limits<int64_t>::min(), kMaxInt)) {
    s.seed = static_cast<uint64_t>(*seed);
    o.seed_given = true;
  } else {
    s.seed = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  }
  if (const Json* stop = f.find("stop")) {
    if (stop->is_string()) {
      o.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 64) {
      for (const Json& s : *stop) {
        if (!s.is_string()) throw bad_request("'stop' must be a string or a list of strings", "stop", "invalid_type");
        o.stop.push_back(s.get<std::string>());
      }
    } else {
      throw bad_request("'stop' must be a string or a list of at most 64 strings", "stop", "invalid_type");
    }
  }
  if (const Json* ids = f.find("stop_token_ids")) {
    if (!ids->is_array()) throw Fields::wrong_type("stop_token_ids", "a list of token ids", *ids);
    o.stop_token_ids = token_ids(*ids, "stop_token_ids");
  }
  o.ignore_eos = f.boolean("ignore_eos").value_or(false);
  o.skip_special_tokens = f.boolean("skip_special_tokens").value_or(true);
  o.stream = f.boolean("stream").value_or(false);
  if (const Json* options = f.find("stream_options")) {
    if (!options->is_object()) throw Fields::wrong_type("stream_options", "an object", *options);
    o.include_usage = Fields(*options).boolean("include_usage").value_or(false);
  }
  o.n = static_cast<int32_t>(f.integer("n", 1, kMaxChoices).value_or(1));
  if (const Json* bias = f.find("logit_bias"); bias && !bias->is_null()) {
    parse_logit_bias(*bias, o.sampling);
  }
  if (const Json* format = f.find("response_format"); format && !format->is_null()) {
    o.grammar = parse_response_format(*format);
  }
  if (std::shared_ptr<const text::JsonGrammar> guided = parse_guided_decoding(f)) {
    if (o.grammar) {
      throw bad_request("give one of a structured 'response_format', 'guided_json', 'guided_regex' and 'guided_choice'",
                        "response_format", "invalid_value");
    }
    o.grammar = std::move(guided);
  }
  if (const Json* outputs = f.find("structured_outputs")) {
    if (o.grammar) {
      throw bad_request("give one of 'structured_outputs', a structured 'response_format' and vLLM's guided_* fields",
                        "structured_outputs", "invalid_value");
    }
    o.grammar = parse_structured_outputs(*outputs);
  }
  if (o.grammar && o.ignore_eos) {
    throw bad_request("'ignore_eos' cannot be combined with a structured output (it ends where the value does)",
                      "ignore_eos", "invalid_value");
  }
  return o;
}

// Each tool must be {"type": "function", "function": {"name": ..., ...}}.
void check_tools(const Json& tools) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string param = fmt::format("tools[{}]", i);
    const Json& tool = tools[i];
    if (!tool.is_object()) throw Fields::wrong_type(param, "a tool object", tool);
    if (Fields(tool).string("type").value_or("function") != "function") {
      throw bad_request(param + ".type must be \"function\"", param + ".type", "invalid_value");
    }
    const Json* function = Fields(tool).find("function");
    if (!function) throw bad_request(param + ".function is required", param + ".function", "missing_required_parameter");
    if (!function->is_object()) throw Fields::wrong_type(param + ".function", "a function object", *function);
    const std::optional<std::string> name = Fields(*function).string("name");
    if (!name || name->empty()) {
      throw bad_request(param + ".function.name must be a non-empty string", param + ".function.name",
                        "invalid_value");
    }
  }
}

// OpenAI's tool_choice: "none" leaves the tools out of the prompt (and the
// answer is text), "auto" keeps them, "required" keeps them and makes the
// answer a call of one of them, a named function keeps only that one and
// makes the answer its call. Returns whether a call is forced (the server
// constrains the answer to the call's markup: text/tool_call_grammar.h).
bool apply_tool_choice(const Json* choice, std::optional<Json>& tools) {
  if (!choice || choice->is_null()) return false;
  if (choice->is_string()) {
    const std::string value = choice->get<std::string>();
    if (value == "none") {
      tools.reset();
    } else if (value == "required") {
      if (!tools) throw bad_request("'tool_choice': \"required\" needs 'tools'", "tool_choice", "invalid_value");
      return true;
    } else if (value != "auto") {
      throw bad_request(fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": "
                                    "\"function\", \"function\": {{\"name\": ...}}}}, not \"{}\"",
                                    value),
                        "tool_choice", "invalid_value");
    }
    return false;
  }
  if (!choice->is_object()) throw Fields::wrong_type("tool_choice", "a string or an object", *choice);
  const Json* function = Fields(*choice).find("function");
  const std::optional<std::string> name =
      function && function->is_object() ? Fields(*function).string("name") : std::nullopt;
  if (!name) {
    throw bad_request("'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                      "tool_choice", "invalid_value");
  }
  Json kept = Json::array();
  if (tools) {
    for (const Json& tool : *tools) {
      if (tool["function"]["name"] == *name) kept.push_back(tool);
    }
  }
  if (kept.empty()) {
    throw bad_request(fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", *name),
                      "tool_choice", "invalid_value");
  }
  tools = std::move(kept);
  return true;
}

}  // namespace

ChatCompletionRequest parse_chat_completion_request(std::string_view body_text) {
  const Json body = parse_object(body_text);
  Fields f(body);
  ChatCompletionRequest r;
  r.model = required_model(f);
  const Json* messages = f.find("messages");
  if (!messages) throw bad_request("'messages' is required", "messages", "missing_required_parameter");
  if (!messages->is_array()) throw Fields::wrong_type("messages", "a list of messages", *messages);
  if (messages->empty()) throw bad_request("'messages' must hold at least one message", "messages", "invalid_value");
  static const std::vector<std::string> kRoles = {"system", "developer", "user", "assistant", "tool", "function"};
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string param = fmt::format("messages[{}]", i);
    const Json& m = (*messages)[i];
    if (!m.is_object()) throw Fields::wrong_type(param, "a message object", m);
    std::optional<std::string> role = Fields(m).string("role");
    if (!role) throw bad_request(param + ".role is required", param + ".role", "missing_required_parameter");
    if (std::find(kRoles.begin(), kRoles.end(), *role) == kRoles.end()) {
      throw bad_request(fmt::format("{}.role '{}' is not one of system, developer, user, assistant, tool, function",
                                    param, *role),
                        param + ".role", "invalid_value");
    }
    if (const Json* content = Fields(m).find("content"); content && content->is_array()) {
      for (size_t j = 0; j < content->size(); ++j) {
        const Json& part = (*content)[j];
        const std::string part_param = fmt::format("{}.content[{}]", param, j);
        if (!part.is_object()) throw Fields::wrong_type(part_param, "a content part object", part);
        if (Fields(part).string("type") == "text" && !Fields(part).string("text")) {
          throw bad_request(part_param + ".text must be a string", part_param + ".text", "invalid_type");
        }
      }
    }
    try {
      r.messages.push_back(text::ChatMessage::from_json(m));
    } catch (const Error& e) {
      throw bad_request(fmt::format("{}: {}", param, e.message()), param, "invalid_value");
    }
  }
  if (const Json* tools = f.find("tools"); tools && !tools->is_null()) {
    if (!tools->is_array()) throw Fields::wrong_type("tools", "a list of tools", *tools);
    check_tools(*tools);
    if (!tools->empty()) r.tools = *tools;
  }
  r.force_tool_call = apply_tool_choice(f.find("tool_choice"), r.tools);
  r.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
  r.options = parse_generation_options(body, /*chat=*/true);
  if (r.force_tool_call && r.options.grammar) {
    throw bad_request("a structured 'response_format' cannot be combined with a 'tool_choice' that forces a call",
                      "response_format", "invalid_value");
  }
  r.options.logprobs = f.boolean("logprobs").value_or(false);
  if (std::optional<int64_t> top = f.integer("top_logprobs", 0, 20)) {
    if (!r.options.logprobs && *top > 0) {
      throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
    }
    r.options.top_logprobs = static_cast<int32_t>(*top);
  }
  return r;
}

CompletionRequest parse_completion_request(std::string_view body_text) {
  const Json body = parse_object(body_text);
  Fields f(body);
  CompletionRequest r;
  r.model = required_model(f);
  const Json* prompt = f.find("prompt");
  if (!prompt) throw bad_request("'prompt' is required", "prompt", "missing_required_parameter");
  const char* kShapes = "'prompt' must be a string, a list of token ids, or a list of either (one prompt each)";
  // A list of strings or of id lists is several prompts; a list of numbers is one.
  const bool several = prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array());
  std::vector<const Json*> items;
  if (several) {
    for (const Json& item : *prompt) items.push_back(&item);
  } else {
    items.push_back(prompt);
  }
  if (static_cast<int64_t>(items.size()) > kMaxChoices) {
    throw bad_request(fmt::format("at most {} prompts in one request", kMaxChoices), "prompt", "invalid_value");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& one = *items[i];
    const std::string param = several ? fmt::format("prompt[{}]", i) : std::string("prompt");
    CompletionPrompt p;
    if (one.is_string() && (!several || (*prompt)[0].is_string())) {
      p.text = one.get<std::string>();
    } else if (one.is_array() && !one.empty() && (!several || (*prompt)[0].is_array())) {
      p.ids = token_ids(one, param);
    } else {
      throw bad_request(kShapes, param, one.is_array() || one.is_string() ? "invalid_value" : "invalid_type");
    }
    r.prompts.push_back(std::move(p));
  }
  r.options = parse_generation_options(body, /*chat=*/false);
  r.options.best_of = static_cast<int32_t>(f.integer("best_of", 1, kMaxChoices).value_or(r.options.n));
  if (r.options.best_of < r.options.n) {
    throw bad_request(fmt::format("'best_of' ({}) must be at least 'n' ({}): it is how many candidates the n "
                                  "choices are picked from", r.options.best_of, r.options.n),
                      "best_of", "invalid_value");
  }
  if (r.options.best_of > r.options.n && r.options.stream) {
    throw bad_request("'best_of' greater than 'n' cannot be streamed: the best choices are known only at the end",
                      "best_of", "invalid_value");
  }
  if (static_cast<int64_t>(r.prompts.size()) * r.options.candidates() > kMaxChoices) {
    throw bad_request(fmt::format("{} prompts with {} = {} make more than {} choices: send fewer in one request",
                                  r.prompts.size(), r.options.best_of > r.options.n ? "best_of" : "n",
                                  r.options.candidates(), kMaxChoices),
                      r.options.best_of > r.options.n ? "best_of" : "n", "invalid_value");
  }
  if (std::optional<int64_t> logprobs = f.integer("logprobs", 0, 20)) {
    r.options.logprobs = true;
    r.options.top_logprobs = static_cast<int32_t>(*logprobs);
  }
  r.options.echo = f.boolean("echo").value_or(false);
  if (r.options.max_tokens == 0 && !r.options.echo) {
    throw bad_request("'max_tokens' 0 generates nothing: it is meaningful only with 'echo' (to score the prompt)",
                      "max_tokens", "invalid_value");
  }
  if (f.string("suffix").value_or("").size()) throw bad_request("'suffix' is not supported", "suffix", "unsupported_value");
  return r;
}

EncodeRequest parse_encode_request(std::string_view body_text) {
  const Json body = parse_object(body_text);
  Fields f(body);
  EncodeRequest r;
  const Json* input = f.find("input");
  if (!input) throw bad_request("'input' is required", "input", "missing_required_parameter");
  if (input->is_string()) {
    r.inputs.push_back(input->get<std::string>());
  } else if (input->is_array()) {
    r.batched = true;
    for (const Json& s : *input) {
      if (!s.is_string()) throw bad_request("'input' must be a string or a list of strings", "input", "invalid_type");
      r.inputs.push_back(s.get<std::string>());
    }
  } else {
    throw Fields::wrong_type("input", "a string or a list of strings", *input);
  }
  r.do_preprocess = f.boolean("do_preprocess").value_or(false);
  r.add_bos = f.boolean("add_bos").value_or(true);
  return r;
}

}  // namespace tessera::server
