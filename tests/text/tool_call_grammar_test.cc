// The grammar of a forced tool call: the format's markup around one call of
// one of the tools, arguments by the tool's parameters schema, and the
// parser of the same format reading back what the grammar lets through.
#include <gtest/gtest.h>

#include <string>

#include "text/json_matcher.h"
#include "text/tool_call_grammar.h"
#include "text/tool_calls.h"

namespace tessera::text {
namespace {

using Json = nlohmann::ordered_json;

bool takes_whole(const JsonGrammar& grammar, const std::string& text, bool* done = nullptr) {
  JsonMatcher matcher(grammar);
  if (!matcher.advance(std::string_view(text))) return false;
  if (done) *done = matcher.done();
  return matcher.can_end();
}

const std::vector<ToolSignature>& tools() {
  static const std::vector<ToolSignature> all = {
      {"get_weather", Json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"]})")},
      {"search", Json::parse(R"({"type": "object", "properties": {"query": {"type": "string"},
                                 "limit": {"type": "integer"}}, "required": ["query"]})")},
  };
  return all;
}

TEST(ToolCallGrammar, TakesOneCallInEachFormatsMarkupAndItsParserReadsIt) {
  const struct {
    ToolCallFormat format;
    std::string text;
  } cases[] = {
      {ToolCallFormat::kQwen,
       "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"tea\", \"limit\": 3}}\n</tool_call>"},
      {ToolCallFormat::kInternLM,
       "<|action_start|><|plugin|>\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|action_end|>"},
      {ToolCallFormat::kLlama3, R"({"name": "search", "parameters": {"query": "tea"}})"},
      {ToolCallFormat::kMistral, R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}])"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(tool_call_format_name(c.format));
    const ToolCallGrammar grammar = tool_call_grammar(c.format, tools());
    EXPECT_TRUE(grammar.loose.empty());
    bool done = false;
    EXPECT_TRUE(takes_whole(grammar.grammar, c.text, &done));
    EXPECT_TRUE(done);
    const ToolCallText parsed = parse_tool_calls(c.format, c.text);
    ASSERT_EQ(parsed.calls.size(), 1u);
    EXPECT_TRUE(parsed.content.empty());
    EXPECT_FALSE(takes_whole(grammar.grammar, "Sure. " + c.text));  // nothing before the call
  }
}

TEST(ToolCallGrammar, HoldsTheArgumentsToTheChosenToolsSchema) {
  const JsonGrammar qwen = tool_call_grammar(ToolCallFormat::kQwen, tools()).grammar;
  const auto call = [](const std::string& object) { return "<tool_call>\n" + object + "\n</tool_call>"; };
  EXPECT_TRUE(takes_whole(qwen, call(R"({"name": "get_weather", "arguments": {"city": "Rome"}})")));
  EXPECT_FALSE(takes_whole(qwen, call(R"({"name": "get_weather", "arguments": {"query": "Rome"}})")));
  EXPECT_FALSE(takes_whole(qwen, call(R"({"name": "search", "arguments": {"query": "x", "limit": "3"}})")));
  EXPECT_FALSE(takes_whole(qwen, call(R"({"name": "delete_all", "arguments": {}})")));
  EXPECT_FALSE(takes_whole(qwen, call(R"({"arguments": {"city": "Rome"}, "name": "get_weather"})")));
  const std::string rome = call(R"({"name": "get_weather", "arguments": {"city": "Rome"}})");
  EXPECT_FALSE(takes_whole(qwen, std::string(1, ' ').append(rome)));
}

TEST(ToolCallGrammar, ASchemaOutsideTheSubsetTakesAnyObjectAndSaysWhy) {
  const std::vector<ToolSignature> loose_tools = {
      {"when", Json::parse(R"({"type": "object", "properties": {"day": {"type": "string", "format": "iri"}}})")},
      {"any", Json()}};
  const ToolCallGrammar grammar = tool_call_grammar(ToolCallFormat::kLlama3, loose_tools);
  ASSERT_EQ(grammar.loose.size(), 1u);
  EXPECT_NE(grammar.loose[0].find("tools[0].function.parameters at '#/properties/day/format'"), std::string::npos)
      << grammar.loose[0];
  EXPECT_TRUE(takes_whole(grammar.grammar, R"({"name": "when", "parameters": {"anything": [1, 2]}})"));
  EXPECT_TRUE(takes_whole(grammar.grammar, R"({"name": "any", "parameters": {}})"));
  EXPECT_FALSE(takes_whole(grammar.grammar, R"({"name": "any", "parameters": 3})"));
}

TEST(ToolCallGrammar, ManyToolsShareOneObjectWithTheNameAnEnum) {
  std::vector<ToolSignature> many;
  for (int i = 0; i < 40; ++i) many.push_back({"tool_" + std::to_string(i), Json()});
  const ToolCallGrammar grammar = tool_call_grammar(ToolCallFormat::kLlama3, many);
  EXPECT_EQ(grammar.loose.size(), 1u);
  EXPECT_TRUE(takes_whole(grammar.grammar, R"({"name": "tool_39", "parameters": {"a": 1}})"));
  EXPECT_FALSE(takes_whole(grammar.grammar, R"({"name": "tool_40", "parameters": {}})"));
}

}  // namespace
}  // namespace tessera::text
