// Tool calls in model output: each format's markup read into calls (checked
// against the JSON the answer was built from), malformed calls kept as
// content, and the streaming reader against the one-shot parse with the text
// cut at every boundary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cctype>

#include "text/tool_calls.h"

namespace tessera::text {
namespace {

using Json = nlohmann::json;

// Arguments compare as JSON values: the text's spacing is not the point.
void expect_call(const ToolCall& call, const std::string& name, const Json& arguments) {
  EXPECT_EQ(call.name, name);
  EXPECT_EQ(Json::parse(call.arguments), arguments) << call.arguments;
}

const Json kParis = {{"city", "Paris"}, {"unit", "celsius"}};

TEST(ToolCalls, InternLMCallAfterContent) {
  const std::string text = "I will look that up.<|action_start|><|plugin|>\n"
                           "{\"name\": \"get_weather\", \"parameters\": " + kParis.dump() + "}<|action_end|>";
  ToolCallText parsed = parse_tool_calls(ToolCallFormat::kInternLM, text);
  EXPECT_EQ(parsed.content, "I will look that up.");
  ASSERT_EQ(parsed.calls.size(), 1u);
  expect_call(parsed.calls[0], "get_weather", kParis);
}

TEST(ToolCalls, InternLMCallWhoseEndMarkerWasAStopToken) {
  ToolCallText parsed = parse_tool_calls(ToolCallFormat::kInternLM,
                                         "<|action_start|><|plugin|>\n{\"name\": \"now\", \"arguments\": {}}");
  EXPECT_EQ(parsed.content, "");
  ASSERT_EQ(parsed.calls.size(), 1u);
  expect_call(parsed.calls[0], "now", Json::object());
}

TEST(ToolCalls, QwenSeveralBlocksAndBracesInsideStrings) {
  const Json tricky = {{"query", "a } brace and a \"quote\" and {"}, {"tags", {"x", "y"}}};
  const std::string text = "<tool_call>\n{\"name\": \"search\", \"arguments\": " + tricky.dump() +
                           "}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + kParis.dump() +
                           "}\n</tool_call>";
  ToolCallText parsed = parse_tool_calls(ToolCallFormat::kQwen, text);
  EXPECT_EQ(parsed.content, "");
  ASSERT_EQ(parsed.calls.size(), 2u);
  expect_call(parsed.calls[0], "search", tricky);
  expect_call(parsed.calls[1], "get_weather", kParis);
}

TEST(ToolCalls, QwenNonAsciiArgumentsStayUtf8) {
  ToolCallText parsed = parse_tool_calls(
      ToolCallFormat::kQwen, "<tool_call>{\"name\": \"weather\", \"arguments\": {\"city\": \"上海\"}}</tool_call>");
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_NE(parsed.calls[0].arguments.find("上海"), std::string::npos);
}

TEST(ToolCalls, Llama3BareJsonAndPythonTag) {
  ToolCallText bare = parse_tool_calls(
      ToolCallFormat::kLlama3, "  {\"name\": \"get_weather\", \"parameters\": " + kParis.dump() +
                                   "}; {\"name\": \"now\", \"parameters\": {}}\n");
  ASSERT_EQ(bare.calls.size(), 2u);
  expect_call(bare.calls[0], "get_weather", kParis);
  expect_call(bare.calls[1], "now", Json::object());
  ToolCallText tagged = parse_tool_calls(ToolCallFormat::kLlama3,
                                         "<|python_tag|>{\"name\": \"now\", \"parameters\": {\"tz\": \"UTC\"}}");
  ASSERT_EQ(tagged.calls.size(), 1u);
  expect_call(tagged.calls[0], "now", Json{{"tz", "UTC"}});
}

TEST(ToolCalls, MistralListOfCalls) {
  ToolCallText parsed = parse_tool_calls(
      ToolCallFormat::kMistral, "On it.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + kParis.dump() +
                                    "}, {\"name\": \"now\", \"arguments\": {}}]");
  EXPECT_EQ(parsed.content, "On it.");
  ASSERT_EQ(parsed.calls.size(), 2u);
  expect_call(parsed.calls[0], "get_weather", kParis);
  expect_call(parsed.calls[1], "now", Json::object());
}

TEST(ToolCalls, IdsAreFreshAndMistralsHaveNineAlphanumerics) {
  const std::string a = tool_call_id(ToolCallFormat::kMistral), b = tool_call_id(ToolCallFormat::kMistral);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 9u);
  for (char c : a) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << a;
  const std::string openai = tool_call_id(ToolCallFormat::kQwen);
  EXPECT_TRUE(openai.starts_with("call_")) << openai;
  EXPECT_EQ(openai.size(), 29u);
}

TEST(ToolCalls, StringArgumentsAreKeptAsTheyAre) {
  ToolCallText parsed = parse_tool_calls(
      ToolCallFormat::kQwen, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>");
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].arguments, "{\"a\": 1}");
}

// What is not a well-formed call stays text, whole.
TEST(ToolCalls, MalformedCallsStayContent) {
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::kInternLM, "Sure.<|action_start|><|plugin|>\n{\"name\": \"get_weather\", \"parameters\": {"},
      {ToolCallFormat::kInternLM, "<|action_start|><|plugin|>\n{\"parameters\": {}}<|action_end|>"},
      {ToolCallFormat::kInternLM, "<|action_start|><|plugin|>\nnot json<|action_end|>"},
      {ToolCallFormat::kQwen, "<tool_call>{\"name\": 3}</tool_call>"},
      {ToolCallFormat::kQwen, "<tool_call>{\"name\": \"ok\"}</tool_call><tool_call>{broken</tool_call>"},
      {ToolCallFormat::kLlama3, "{\"name\": \"f\"} and then some words"},
      {ToolCallFormat::kLlama3, "{\"answer\": 42}"},
      {ToolCallFormat::kLlama3, "The JSON is {\"name\": \"f\"}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]{\"name\": \"f\"}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\"} {\"name\": \"g\"}]"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\"}] trailing words"},
  };
  for (const auto& [format, text] : cases) {
    ToolCallText parsed = parse_tool_calls(format, text);
    EXPECT_TRUE(parsed.calls.empty()) << text;
    EXPECT_EQ(parsed.content, text);
  }
}

TEST(ToolCalls, FormatNames) {
  EXPECT_EQ(tool_call_format_from_name("internlm"), ToolCallFormat::kInternLM);
  EXPECT_EQ(tool_call_format_from_name("qwen2d5"), ToolCallFormat::kQwen);
  EXPECT_EQ(tool_call_format_from_name("llama3"), ToolCallFormat::kLlama3);
  EXPECT_EQ(tool_call_format_from_name("mistral"), ToolCallFormat::kMistral);
  EXPECT_EQ(tool_call_format_from_name("granite"), std::nullopt);
  for (ToolCallFormat f :
       {ToolCallFormat::kInternLM, ToolCallFormat::kQwen, ToolCallFormat::kLlama3, ToolCallFormat::kMistral}) {
    EXPECT_EQ(tool_call_format_from_name(tool_call_format_name(f)), f);
  }
}

struct Streamed {
  std::string content;  // everything handed out as content, finish() included
  std::vector<ToolCall> calls;
};

// Feeds `text` cut at `cuts`; no content handed out before the end may hold
// a marker's first byte of a call that follows.
Streamed stream(ToolCallFormat format, const std::string& text, const std::vector<size_t>& cuts) {
  ToolCallStream reader(format);
  Streamed out;
  size_t from = 0;
  for (size_t cut : cuts) {
    out.content += reader.feed(std::string_view(text).substr(from, cut - from));
    from = cut;
  }
  out.content += reader.feed(std::string_view(text).substr(from));
  ToolCallText rest = reader.finish();
  out.content += rest.content;
  out.calls = std::move(rest.calls);
  return out;
}

const std::vector<std::pair<ToolCallFormat, std::string>>& stream_cases() {
  static const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::kInternLM, "I will check <|the|> weather.<|action_start|><|plugin|>\n"
                                  "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|action_end|>"},
      {ToolCallFormat::kInternLM, "No call here, only <|action a lookalike and <|action_start|> half a marker."},
      {ToolCallFormat::kInternLM, "Broken: <|action_start|><|plugin|>\n{\"name\": \"x\", "},
      {ToolCallFormat::kQwen, "Let me see.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"<tool\"}}\n"
                              "</tool_call>"},
      {ToolCallFormat::kQwen, "plain text ending in <tool"},
      {ToolCallFormat::kLlama3, " \n{\"name\": \"now\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3, "Words first, then <|python_tag|>{\"name\": \"now\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3, "  just an answer {with braces}"},
      {ToolCallFormat::kMistral, "Sure [TOOL_C[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]"},
  };
  return cases;
}

void expect_same(const Streamed& got, const ToolCallText& want, const std::string& where) {
  EXPECT_EQ(got.content, want.content) << where;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << where;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.calls[i].name) << where;
    EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << where;
  }
}

TEST(ToolCallStream, EqualsTheOneShotParseAtEveryCut) {
  for (const auto& [format, text] : stream_cases()) {
    const ToolCallText want = parse_tool_calls(format, text);
    expect_same(stream(format, text, {}), want, text + " (whole)");
    for (size_t cut = 1; cut < text.size(); ++cut) {
      expect_same(stream(format, text, {cut}), want, text + " cut at " + std::to_string(cut));
    }
    std::vector<size_t> bytes;
    for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
    expect_same(stream(format, text, bytes), want, text + " byte by byte");
  }
}

// A call's markup never reaches the client as content, even in pieces.
TEST(ToolCallStream, HoldsWhatMayBeginACall) {
  ToolCallStream reader(ToolCallFormat::kInternLM);
  EXPECT_EQ(reader.feed("Checking.<|act"), "Checking.");
  EXPECT_EQ(reader.feed("ion_start|><|plu"), "");
  EXPECT_EQ(reader.feed("gin|>\n{\"name\": \"f\", \"parameters\": {}}"), "");
  ToolCallText rest = reader.finish();
  EXPECT_EQ(rest.content, "");
  ASSERT_EQ(rest.calls.size(), 1u);

  ToolCallStream lookalike(ToolCallFormat::kQwen);
  EXPECT_EQ(lookalike.feed("a <tool"), "a ");
  EXPECT_EQ(lookalike.feed("box> b"), "<toolbox> b");  // released once it is not the marker
  EXPECT_EQ(lookalike.finish().content, "");

  ToolCallStream spaces(ToolCallFormat::kLlama3);
  EXPECT_EQ(spaces.feed("  "), "");  // may open a bare JSON call yet
  EXPECT_EQ(spaces.feed("Hi"), "  Hi");
}

}  // namespace
}  // namespace tessera::text
