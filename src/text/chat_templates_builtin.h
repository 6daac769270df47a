// The built-in chat templates, by the names LMDeploy gives them
// (`--chat-template NAME`), written as Jinja so they render like model templates.
//
// They follow LMDeploy's formats with Hugging Face's add_generation_prompt
// convention (the assistant header is added when asked, never inferred from
// the last message) and bos_token written by the template:
//   internlm2  <|im_start|>role\n...<|im_end|>\n; without a system message,
//              LMDeploy's default InternLM system prompt comes first
//   qwen       ChatML with "You are a helpful assistant." when there is no system message
//   chatml     ChatML, no default system message
//   llama3     <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>, contents trimmed
//   llama2     [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s>
//   mistral    [INST] ... [/INST]...</s>; a system message is prepended to the first user turn
//   vicuna     "<system> USER: ... ASSISTANT: ...</s>" with Vicuna's default system prompt
//   base       the contents concatenated, nothing else
// Content given as a list of parts contributes its text parts.
#pragma once

#include <string>
#include <vector>

namespace tessera::text {

struct BuiltinChatTemplate {
  std::string name;
  std::string source;  // Jinja
};

const std::vector<BuiltinChatTemplate>& builtin_chat_templates();

}  // namespace tessera::text
