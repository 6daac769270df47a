// The grammar of a forced tool call (tool_choice "required", or a named
// function): one call of one of the tools, in the format's markup, with
// nothing before it, e.g. for qwen
//   <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call>
// The arguments follow each tool's parameters schema where the structured
// output subset (json_grammar.h) covers it, else any JSON object.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/json_grammar.h"
#include "text/tool_calls.h"

namespace tessera::text {

struct ToolSignature {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema; null: any object
};

struct ToolCallGrammar {
  JsonGrammar grammar;
  // Tools whose parameters schema is outside the subset (their arguments
  // are any object), with the reason.
  std::vector<std::string> loose;
};

ToolCallGrammar tool_call_grammar(ToolCallFormat format, const std::vector<ToolSignature>& tools);

// The marker texts of the format's markup, which a vocabulary may hold as
// special tokens ("<|action_start|>", "<|plugin|>", "<|action_end|>" for
// internlm).
std::vector<std::string> tool_call_marker_texts(ToolCallFormat format);

}  // namespace tessera::text
