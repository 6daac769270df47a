// Tool calls (OpenAI's function calling) in a chat model's output text.
//
// A model trained for tools writes a call in its own markup; the server turns
// that markup into OpenAI's `tool_calls`. The formats, by LMDeploy's
// `--tool-call-parser` names:
//   internlm  InternLM2 / 2.5: <|action_start|><|plugin|>\n{"name": ..., "parameters": {...}}<|action_end|>
//             (one call; the markers are special tokens, so the text must keep them)
//   qwen      Qwen2.5 (and Hermes-style templates): <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
//             one block per call
//   llama3    Llama 3.1 / 3.2: {"name": ..., "parameters": {...}} as the whole answer, optionally after
//             <|python_tag|>, several separated by ';'
//   mistral   Mistral (v3 tokenizers, Nemo): [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
// The text before the first call is the message's content. Output that looks
// like a call but is not valid JSON with a string "name" is no call: it stays
// content, so nothing the model wrote is lost.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

class Tokenizer;

enum class ToolCallFormat { kInternLM, kQwen, kLlama3, kMistral };

// "internlm" (or "internlm2", "intern-s1"), "qwen" (or "qwen2d5", "hermes"), "llama3", "mistral";
// nullopt for anything else.
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(ToolCallFormat format);
// The names tool_call_format_from_name takes first, for messages: "internlm, qwen, llama3, mistral".
std::string tool_call_format_names();

// The format whose markers are tokens of the vocabulary: <|action_start|> and
// <|plugin|> → internlm; <tool_call> and </tool_call> → qwen; [TOOL_CALLS] →
// mistral; <|python_tag|> → llama3. nullopt when none are.
std::optional<ToolCallFormat> detect_tool_call_format(const Tokenizer& tokenizer);

// True when the format's markers are tokens of the vocabulary (llama3 needs
// none: its calls are bare JSON).
bool tokenizer_has_tool_call_markers(const Tokenizer& tokenizer, ToolCallFormat format);

// True when the format's opening marker is a special token of the
// vocabulary: the answer's text must then keep special tokens to show it.
bool tool_call_markers_are_special(const Tokenizer& tokenizer, ToolCallFormat format);

// A new random id for a call: Mistral's templates take only nine letters and
// digits (and refuse the conversation otherwise), the rest OpenAI's "call_"
// and 24 of them.
std::string tool_call_id(ToolCallFormat format);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object as text, as OpenAI sends it ("{}" when the model gave none)
};

struct ToolCallText {
  std::string content;          // the text before the first call (all of it when there is none)
  std::vector<ToolCall> calls;  // in the order written
};

// Splits a finished answer into its content and its calls.
ToolCallText parse_tool_calls(ToolCallFormat format, std::string_view text);

// The same over streamed text: content is handed out as it comes, except
// what may begin a call (a suffix that is a prefix of the format's start
// marker, or for llama3 an answer that opens with '{'), which is held until
// the text shows what it is; from a call's start on, everything is held and
// finish() parses it. One instance per answer; not thread-safe.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format) : format_(format) {}

  // Adds `chunk` (whole UTF-8 characters); returns the content safe to send now.
  std::string feed(std::string_view chunk);
  // The answer ended: its calls, and the content not handed out yet (the
  // held text itself when it held no valid call).
  ToolCallText finish();

 private:
  ToolCallFormat format_;
  std::string text_;   // everything fed
  size_t sent_ = 0;    // bytes of text_ handed out as content
  bool in_call_ = false;
};

}  // namespace tessera::text
