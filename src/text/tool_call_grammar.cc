#include "text/tool_call_grammar.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::text {
namespace {

// Alternatives the matcher follows at once (JsonMatcher::kMaxAlternatives):
// past this many tools, the name is an enum and the arguments any object.
constexpr size_t kMaxSignatures = 32;

struct Markup {
  std::string open, close;  // around the call object
  const char* arguments;    // the key of the arguments
};

Markup markup_of(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kInternLM: return {"<|action_start|><|plugin|>\n", "<|action_end|>", "parameters"};
    case ToolCallFormat::kQwen: return {"<tool_call>\n", "\n</tool_call>", "arguments"};
    case ToolCallFormat::kLlama3: return {"", "", "parameters"};
    case ToolCallFormat::kMistral: return {"[TOOL_CALLS][", "]", "arguments"};
  }
  return {};
}

}  // namespace

ToolCallGrammar tool_call_grammar(ToolCallFormat format, const std::vector<ToolSignature>& tools) {
  TESSERA_CHECK(!tools.empty());
  const Markup markup = markup_of(format);
  JsonGrammarBuilder builder;
  ToolCallGrammar out;
  std::vector<int32_t> calls;
  if (tools.size() <= kMaxSignatures) {
    for (size_t i = 0; i < tools.size(); ++i) {
      int32_t arguments = JsonGrammar::kAnyObject;
      if (!tools[i].parameters.is_null()) {
        try {
          arguments = builder.schema(tools[i].parameters, fmt::format("tools[{}].function.parameters", i));
        } catch (const Error& e) {
          out.loose.push_back(e.message());
        }
      }
      calls.push_back(builder.object({{"name", builder.constant(tools[i].name)}, {markup.arguments, arguments}}));
    }
  } else {
    nlohmann::ordered_json names = nlohmann::ordered_json::array();
    for (const ToolSignature& tool : tools) names.push_back(tool.name);
    const int32_t name = builder.schema({{"enum", names}}, "the tools' names");
    calls.push_back(builder.object({{"name", name}, {markup.arguments, JsonGrammar::kAnyObject}}));
    out.loose.push_back(fmt::format("{} tools: past {}, any arguments are taken", tools.size(), kMaxSignatures));
  }
  const int32_t call = calls.size() == 1 ? calls.front() : builder.any_of(std::move(calls));
  std::vector<int32_t> parts;
  if (!markup.open.empty()) parts.push_back(builder.raw(markup.open));
  parts.push_back(call);
  if (!markup.close.empty()) parts.push_back(builder.raw(markup.close));
  out.grammar = builder.finish(parts.size() == 1 ? call : builder.sequence(std::move(parts)));
  return out;
}

std::vector<std::string> tool_call_marker_texts(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kInternLM: return {"<|action_start|>", "<|plugin|>", "<|action_end|>"};
    case ToolCallFormat::kQwen: return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::kLlama3: return {};
    case ToolCallFormat::kMistral: return {"[TOOL_CALLS]"};
  }
  return {};
}

}  // namespace tessera::text
