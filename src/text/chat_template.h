// ChatTemplate: turns a conversation into the prompt text a model was trained on.
//
// The template is the model's own (tokenizer_config.json's `chat_template`, or
// chat_template.jinja in the model directory), a built-in one named as
// LMDeploy names them (`--chat-template internlm2`), or a .jinja file. It is
// rendered the way Hugging Face transformers renders it (jinja2 with
// trim_blocks and lstrip_blocks, raise_exception, strftime_now, and a tojson
// that keeps non-ASCII text), so a model sees the prompt it would see there.
//
// The rendered text already holds the special tokens the template writes
// (bos_token included): tokenize it without adding special tokens again.
#pragma once

#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::text {

namespace jinja {
class Template;
}

// One message of a conversation, as OpenAI's chat API sends it. Fields left
// unset are absent from the message the template sees (`is defined` is false).
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  // A string, a list of content parts ([{"type": "text", "text": ...}, ...]) or null.
  std::optional<nlohmann::ordered_json> content;
  std::optional<std::string> name;
  // [{"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}, ...]
  std::optional<nlohmann::ordered_json> tool_calls;
  std::optional<std::string> tool_call_id;

  // Reads an OpenAI message object; throws Error(kInvalidArgument) naming the bad field.
  static ChatMessage from_json(const nlohmann::ordered_json& json);
  // The message as the template sees it: role, content, name, tool_calls, tool_call_id.
  nlohmann::ordered_json to_json() const;
};

struct ChatTemplateInput {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // Tool (function) definitions; absent: the template sees `tools` as none.
  std::optional<nlohmann::ordered_json> tools;
  // More variables for the template (date_string, tools_in_user_message, ...);
  // they override the ones above of the same name.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // The time strftime_now() formats; unset: the current local time.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  // Compiles Jinja source; `name` appears in errors. Throws Error(kInvalidArgument)
  // naming the line and construct of a syntax error.
  static ChatTemplate from_source(std::string_view source, std::string name);

  // The model's own template: chat_template.jinja, else tokenizer_config.json's
  // `chat_template` (a string, or a list of {name, template}: "default" is used,
  // and "tool_use" when tools are given). nullopt when the directory has none.
  static std::optional<ChatTemplate> find_in_model_dir(const std::filesystem::path& dir);

  // A built-in template by LMDeploy's name; throws Error(kInvalidArgument)
  // listing the names when `name` is unknown.
  static ChatTemplate builtin(std::string_view name);
  static std::vector<std::string> builtin_names();

  // What `--chat-template VALUE` means: a built-in name, else a path to a
  // Jinja file. Throws Error(kInvalidArgument) listing the names otherwise.
  static ChatTemplate from_option(const std::string& value);

  // Throws Error(kInvalidArgument): for a template error, naming the template,
  // line and construct; for raise_exception(msg) in the template, with msg as the message.
  std::string render(const ChatTemplateInput& input) const;

  const std::string& name() const { return name_; }
  // Whether the template reads the `tools` variable at all (a template that
  // does not would drop a request's tool definitions without a word).
  bool renders_tools() const { return renders_tools_; }

 private:
  ChatTemplate() = default;

  std::string name_;
  bool renders_tools_ = false;
  // (variant name, template): "default", "tool_use", ... in the file's order.
  std::vector<std::pair<std::string, std::shared_ptr<const jinja::Template>>> variants_;
};

}  // namespace tessera::text
