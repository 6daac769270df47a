#include "text/chat_templates_builtin.h"

namespace tessera::text {
namespace {

// text(content): a string as is; of a list of parts, the text parts joined.
const char kTextMacro[] = R"J({%- macro text(content) -%}
{%- if content is string -%}{{ content }}
{%- elif content is iterable -%}
{%- for part in content if part is mapping and part.type == 'text' -%}{{ part.text }}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
)J";

// ChatML after a prefix that sets `default_system` (may be empty).
const char kChatMLBody[] = R"J({{- bos_token -}}
{%- if default_system and (not messages or messages[0].role != 'system') -%}
{{- '<|im_start|>system\n' + default_system + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{{- '<|im_start|>' + message.role + '\n' + text(message.content) + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
)J";

// InternLM2's ChatML with its agent markup, as LMDeploy's internlm2 template
// writes it: the tools' function definitions as a JSON list in a system
// message named <|plugin|> after the system prompt, an assistant's calls as
// <|action_start|><|plugin|>\n{"name": ..., "parameters": ...}<|action_end|>
// (string arguments, OpenAI's JSON text, are written as they are), and tool
// results as an environment message named <|plugin|>.
const char kInternLM2[] = R"J({%- set default_system = "You are an AI assistant whose name is InternLM (书生·浦语).\n- InternLM (书生·浦语) is a conversational language model that is developed by Shanghai AI Laboratory (上海人工智能实验室). It is designed to be helpful, honest, and harmless.\n- InternLM (书生·浦语) can understand and communicate fluently in the language chosen by the user such as English and 中文.\n" -%}
{%- macro tools_message() -%}
{%- if tools -%}
{{- '<|im_start|>system name=<|plugin|>\n[' -}}
{%- for tool in tools -%}
{{- (', ' if not loop.first else '') + ((tool.function if tool.function is defined else tool) | tojson) -}}
{%- endfor -%}
{{- ']<|im_end|>\n' -}}
{%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- if not messages or messages[0].role != 'system' -%}
{{- '<|im_start|>system\n' + default_system + '<|im_end|>\n' -}}
{{- tools_message() -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'tool' or message.role == 'function' -%}
{{- '<|im_start|>environment name=<|plugin|>\n' + text(message.content) + '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + text(message.content) -}}
{%- if message.role == 'assistant' and message.tool_calls is defined and message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set arguments = call.function.arguments if call.function.arguments is defined else {} -%}
{{- '<|action_start|><|plugin|>\n{"name": ' + (call.function.name | tojson) + ', "parameters": ' + (arguments if arguments is string else arguments | tojson) + '}<|action_end|>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- if loop.first and message.role == 'system' -%}{{- tools_message() -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
)J";

const char kQwen[] = R"J({%- set default_system = "You are a helpful assistant." -%}
)J";

const char kChatML[] = R"J({%- set default_system = "" -%}
)J";

const char kLlama3[] = R"J({{- bos_token -}}
{%- for message in messages -%}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + text(message.content) | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}
)J";

const char kLlama2[] = R"J({%- if messages and messages[0].role == 'system' -%}
{%- set system = text(messages[0].content) -%}
{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- set system = '' -%}
{%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
{%- if message.role == 'user' -%}
{%- set content = text(message.content) | trim -%}
{%- if loop.first and system -%}
{%- set content = '<<SYS>>\n' + system | trim + '\n<</SYS>>\n\n' + content -%}
{%- endif -%}
{{- bos_token + '[INST] ' + content + ' [/INST]' -}}
{%- elif message.role == 'assistant' -%}
{{- ' ' + text(message.content) | trim + ' ' + eos_token -}}
{%- endif -%}
{%- endfor -%}
)J";

const char kMistral[] = R"J({%- if messages and messages[0].role == 'system' -%}
{%- set system = text(messages[0].content) -%}
{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- set system = '' -%}
{%- set loop_messages = messages -%}
{%- endif -%}
{{- bos_token -}}
{%- for message in loop_messages -%}
{%- if message.role == 'user' -%}
{%- if loop.first and system -%}
{{- '[INST] ' + system + '\n\n' + text(message.content) + ' [/INST]' -}}
{%- else -%}
{{- '[INST] ' + text(message.content) + ' [/INST]' -}}
{%- endif -%}
{%- elif message.role == 'assistant' -%}
{{- text(message.content) + eos_token -}}
{%- endif -%}
{%- endfor -%}
)J";

const char kVicuna[] = R"J({%- if messages and messages[0].role == 'system' -%}
{%- set system = text(messages[0].content) -%}
{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- set system = "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, detailed, and polite answers to the user's questions." -%}
{%- set loop_messages = messages -%}
{%- endif -%}
{{- bos_token + system + ' ' -}}
{%- for message in loop_messages -%}
{%- if message.role == 'user' -%}
{{- 'USER: ' + text(message.content) + ' ' -}}
{%- elif message.role == 'assistant' -%}
{{- 'ASSISTANT: ' + text(message.content) + eos_token -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'ASSISTANT: ' -}}{%- endif -%}
)J";

const char kBase[] = R"J({%- for message in messages -%}{{- text(message.content) -}}{%- endfor -%}
)J";

}  // namespace

const std::vector<BuiltinChatTemplate>& builtin_chat_templates() {
  const auto chatml = [](const char* prefix) {
    return std::string(kTextMacro) + prefix + kChatMLBody;
  };
  const auto plain = [](const char* body) { return std::string(kTextMacro) + body; };
  static const std::vector<BuiltinChatTemplate> templates = {
      {"internlm2", plain(kInternLM2)}, {"llama3", plain(kLlama3)}, {"llama2", plain(kLlama2)},
      {"qwen", chatml(kQwen)},           {"chatml", chatml(kChatML)}, {"mistral", plain(kMistral)},
      {"vicuna", plain(kVicuna)},        {"base", plain(kBase)},
  };
  return templates;
}

}  // namespace tessera::text
