#include "text/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/chat_templates_builtin.h"
#include "text/jinja/template.h"

namespace tessera::text {
namespace {

using nlohmann::ordered_json;

[[noreturn]] void bad_message(const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument, "chat message: " + what,
              "each message is {\"role\": ..., \"content\": ...} with optional name, "
              "tool_calls and tool_call_id");
}

std::optional<std::string> optional_string(const ordered_json& json, const char* key) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) bad_message(std::string("'") + key + "' must be a string");
  return it->get<std::string>();
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::kInvalidArgument, "cannot read chat template file " + path.string(),
                "check the path and its permissions");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string format_time(const std::string& format, const std::tm& time) {
  if (format.empty()) return "";
  std::string buffer(format.size() * 4 + 64, '\0');
  const size_t n = std::strftime(buffer.data(), buffer.size(), format.c_str(), &time);
  buffer.resize(n);
  return buffer;
}

std::string join_names() {
  std::string names;
  for (const auto& name : ChatTemplate::builtin_names()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

ChatMessage ChatMessage::from_json(const ordered_json& json) {
  if (!json.is_object()) bad_message("expected an object, got " + std::string(json.type_name()));
  ChatMessage message;
  const auto role = json.find("role");
  if (role == json.end() || !role->is_string()) bad_message("'role' must be a string");
  message.role = role->get<std::string>();
  if (const auto content = json.find("content"); content != json.end()) {
    if (!content->is_string() && !content->is_array() && !content->is_null())
      bad_message("'content' must be a string, a list of parts or null");
    message.content = *content;
  }
  message.name = optional_string(json, "name");
  if (const auto calls = json.find("tool_calls"); calls != json.end() && !calls->is_null()) {
    if (!calls->is_array()) bad_message("'tool_calls' must be a list");
    message.tool_calls = *calls;
  }
  message.tool_call_id = optional_string(json, "tool_call_id");
  return message;
}

ordered_json ChatMessage::to_json() const {
  ordered_json json = ordered_json::object();
  json["role"] = role;
  if (content) json["content"] = *content;
  if (name) json["name"] = *name;
  if (tool_calls) json["tool_calls"] = *tool_calls;
  if (tool_call_id) json["tool_call_id"] = *tool_call_id;
  return json;
}

ChatTemplate ChatTemplate::from_source(std::string_view source, std::string name) {
  ChatTemplate result;
  result.name_ = name;
  result.variants_.emplace_back("default",
                                std::make_shared<const jinja::Template>(source, "chat template " + name));
  result.renders_tools_ = source.find("tools") != std::string_view::npos;
  return result;
}

std::optional<ChatTemplate> ChatTemplate::find_in_model_dir(const std::filesystem::path& dir) {
  const auto jinja_file = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_file)) return from_source(read_file(jinja_file), jinja_file.string());
  const auto config_file = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config_file)) return std::nullopt;
  ordered_json config;
  try {
    config = ordered_json::parse(read_file(config_file));
  } catch (const ordered_json::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, config_file.string() + ": not valid JSON: " + e.what(),
                "restore the file from the model's repository");
  }
  const auto field = config.find("chat_template");
  if (field == config.end() || field->is_null()) return std::nullopt;
  const std::string where = config_file.string() + " chat_template";
  if (field->is_string()) return from_source(field->get<std::string>(), where);
  if (!field->is_array())
    throw Error(ErrorKind::kInvalidArgument, where + ": expected a string or a list of {name, template}",
                "restore the file from the model's repository");
  ChatTemplate result;
  result.name_ = where;
  for (const auto& item : *field) {
    if (!item.is_object() || !item.contains("name") || !item.contains("template") ||
        !item["name"].is_string() || !item["template"].is_string())
      throw Error(ErrorKind::kInvalidArgument, where + ": each entry must be {\"name\": ..., \"template\": ...}",
                  "restore the file from the model's repository");
    const std::string variant = item["name"].get<std::string>();
    if (item["template"].get_ref<const std::string&>().find("tools") != std::string::npos) result.renders_tools_ = true;
    result.variants_.emplace_back(variant, std::make_shared<const jinja::Template>(
                                               item["template"].get<std::string>(),
                                               "chat template " + where + " '" + variant + "'"));
  }
  if (result.variants_.empty()) return std::nullopt;
  return result;
}

std::vector<std::string> ChatTemplate::builtin_names() {
  std::vector<std::string> names;
  for (const auto& entry : builtin_chat_templates()) names.emplace_back(entry.name);
  return names;
}

ChatTemplate ChatTemplate::builtin(std::string_view name) {
  for (const auto& entry : builtin_chat_templates())
    if (name == entry.name) return from_source(entry.source, "'" + entry.name + "'");
  throw Error(ErrorKind::kInvalidArgument, "unknown chat template '" + std::string(name) + "'",
              "built-in chat templates: " + join_names() + "; or give a path to a .jinja file");
}

ChatTemplate ChatTemplate::from_option(const std::string& value) {
  for (const auto& entry : builtin_chat_templates())
    if (value == entry.name) return builtin(value);
  const std::filesystem::path path(value);
  if (std::filesystem::is_regular_file(path)) return from_source(read_file(path), path.string());
  throw Error(ErrorKind::kInvalidArgument,
              "--chat-template " + value + ": neither a built-in chat template nor a file",
              "built-in chat templates: " + join_names() + "; or give a path to a .jinja file");
}

std::string ChatTemplate::render(const ChatTemplateInput& input) const {
  // As transformers picks among named templates: tool_use when tools are given, else default.
  const jinja::Template* chosen = nullptr;
  const auto find = [&](const char* variant) -> const jinja::Template* {
    for (const auto& [name, tmpl] : variants_)
      if (name == variant) return tmpl.get();
    return nullptr;
  };
  if (input.tools) chosen = find("tool_use");
  if (!chosen) chosen = find("default");
  if (!chosen && variants_.size() == 1) chosen = variants_[0].second.get();
  if (!chosen)
    throw Error(ErrorKind::kInvalidArgument,
                "chat template " + name_ + " has several variants and none is named 'default'",
                "choose one with --chat-template");

  ordered_json messages = ordered_json::array();
  for (const auto& message : input.messages) messages.push_back(message.to_json());

  jinja::Map variables;
  try {
    variables.set("messages", jinja::from_json(messages));
    variables.set("tools", input.tools ? jinja::from_json(*input.tools) : jinja::Value::none());
    variables.set("add_generation_prompt", jinja::Value(input.add_generation_prompt));
    variables.set("bos_token", jinja::Value(input.bos_token));
    variables.set("eos_token", jinja::Value(input.eos_token));
    if (!input.extra.is_object())
      throw Error(ErrorKind::kInvalidArgument, "chat template variables must be a JSON object");
    for (const auto& [key, value] : input.extra.items()) variables.set(key, jinja::from_json(value));
  } catch (const jinja::EvalError& e) {
    throw Error(ErrorKind::kInvalidArgument, std::string("chat template input: ") + e.what());
  }
  const std::string template_name = chosen->name();
  variables.set("raise_exception", jinja::make_function("raise_exception", [template_name](const jinja::CallArgs& args) -> jinja::Value {
    const std::string message = args.positional.empty() ? "" : jinja::to_str(args.positional[0]);
    throw Error(ErrorKind::kInvalidArgument, message,
                "the conversation was refused by " + template_name);
  }));
  std::tm now{};
  if (input.now) {
    now = *input.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  variables.set("strftime_now", jinja::make_function("strftime_now", [now](const jinja::CallArgs& args) {
    if (args.positional.empty() || !args.positional[0].is_string())
      throw jinja::EvalError("strftime_now() takes a format string");
    return jinja::Value(format_time(args.positional[0].as_string(), now));
  }));
  return chosen->render(variables);
}

}  // namespace tessera::text
