// Reasoning ("thinking") text in a chat model's answer, for OpenAI-style
// `reasoning_content` (LMDeploy's and vLLM's `--reasoning-parser`).
//
// DeepSeek-R1 (and its Qwen / Llama distillations) and QwQ think first, inside
// <think> ... </think>, then answer. Their templates often end the prompt
// with "<think>\n", so the answer may start inside the thinking without the
// opening tag: everything before the first </think> is reasoning (a leading
// <think> dropped), everything after it the content; an answer that never
// closes the tag is all reasoning (it was cut short while thinking).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessera::text {

class Tokenizer;

enum class ReasoningFormat { kThinkTags };

// "deepseek-r1", "qwen-qwq" (LMDeploy's names); nullopt for anything else.
std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name);
std::string reasoning_format_names();  // for messages: "deepseek-r1, qwen-qwq"

// True when the closing tag is a special token of the vocabulary (the text
// must then keep special tokens for the split to see it).
bool reasoning_tags_are_special(const Tokenizer& tokenizer, ReasoningFormat format);

struct ReasoningText {
  std::string reasoning;
  std::string content;
};

ReasoningText split_reasoning(ReasoningFormat format, std::string_view text);

// The same over streamed text: each feed returns what it adds to either part;
// what may be the start of a tag is held until the text shows what it is.
// One instance per answer; not thread-safe.
class ReasoningStream {
 public:
  explicit ReasoningStream(ReasoningFormat format) : format_(format) {}

  ReasoningText feed(std::string_view chunk);
  // The answer ended: what was held back.
  ReasoningText finish();

 private:
  ReasoningFormat format_;
  bool thinking_ = true;   // before the closing tag
  bool at_start_ = true;   // nothing handed out yet: a leading <think> may still come
  std::string pending_;    // held: a possible start of a tag
};

}  // namespace tessera::text
