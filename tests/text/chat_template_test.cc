// ChatTemplate: where templates come from (model directory, built-in names,
// .jinja files), how a conversation reaches them, and the real templates of
// the shared test data rendering known conversations. The comparison of every
// real template with jinja2 is tests/python/test_chat_templates.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "../test_paths.h"
#include "core/error.h"
#include "text/chat_template.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

class textChatTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_chat_template_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

  fs::path dir_;
};

ChatTemplateInput conversation() {
  ChatTemplateInput input;
  input.messages = {ChatMessage::from_json({{"role", "system"}, {"content", "Be brief."}}),
                    ChatMessage::from_json({{"role", "user"}, {"content", "Hi!"}})};
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  std::tm now{};
  now.tm_year = 2024 - 1900;
  now.tm_mon = 6;
  now.tm_mday = 26;
  input.now = now;
  return input;
}

std::string read_testdata(const std::string& name) {
  std::ifstream in(testing::testdata_dir() / "chat_templates" / name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(textChatTemplate, RealTemplatesRenderKnownPrompts) {
  TESSERA_REQUIRE_TESTDATA("chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  // Expected texts are jinja2's (transformers' settings) for the same input.
  EXPECT_EQ(ChatTemplate::from_source(read_testdata("internlm-internlm2_5-7b-chat.jinja"), "internlm2.5")
                .render(conversation()),
            "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate::from_source(read_testdata("Qwen-Qwen2.5-7B-Instruct.jinja"), "qwen2.5")
                .render(conversation()),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate::from_source(read_testdata("meta-llama-Llama-3.2-3B-Instruct.jinja"), "llama3.2")
                .render(conversation()),
            "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
            "Hi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST_F(textChatTemplate, EveryRealTemplateCompilesAndRendersWithTools) {
  TESSERA_REQUIRE_TESTDATA("chat_templates");
  int count = 0;
  for (const auto& entry : fs::directory_iterator(testing::testdata_dir() / "chat_templates")) {
    if (entry.path().extension() != ".jinja") continue;
    ++count;
    const auto tmpl = ChatTemplate::from_option(entry.path().string());
    ChatTemplateInput input = conversation();
    input.messages.erase(input.messages.begin());  // some templates refuse a system message
    input.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
        "description": "d", "parameters": {"type": "object", "properties": {}, "required": []}}}])");
    EXPECT_NE(tmpl.render(input).find("Hi!"), std::string::npos) << entry.path();
  }
  EXPECT_GE(count, 10);
}

TEST_F(textChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  TESSERA_REQUIRE_TESTDATA("chat_templates/google-gemma-2-2b-it.jinja");
  const auto gemma = ChatTemplate::from_source(read_testdata("google-gemma-2-2b-it.jinja"), "gemma");
  try {
    gemma.render(conversation());
    FAIL() << "gemma accepted a system message";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.message(), "System role not supported");
  }
}

TEST_F(textChatTemplate, ModelDirectoryTemplates) {
  EXPECT_FALSE(ChatTemplate::find_in_model_dir(dir_).has_value());
  write(dir_ / "tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(ChatTemplate::find_in_model_dir(dir_).has_value());

  write(dir_ / "tokenizer_config.json", R"({"chat_template": "{{ bos_token }}{{ messages[-1].content }}"})");
  EXPECT_EQ(ChatTemplate::find_in_model_dir(dir_)->render(conversation()), "<s>Hi!");

  // A list of named templates: "tool_use" when tools are given, "default" otherwise.
  write(dir_ / "tokenizer_config.json", R"({"chat_template": [
      {"name": "default", "template": "plain"},
      {"name": "tool_use", "template": "tools: {{ tools|length }}"}]})");
  const auto named = ChatTemplate::find_in_model_dir(dir_);
  ChatTemplateInput input = conversation();
  EXPECT_EQ(named->render(input), "plain");
  input.tools = ordered_json::array({ordered_json::object()});
  EXPECT_EQ(named->render(input), "tools: 1");

  // chat_template.jinja wins over tokenizer_config.json.
  write(dir_ / "chat_template.jinja", "jinja file\n");
  EXPECT_EQ(ChatTemplate::find_in_model_dir(dir_)->render(conversation()), "jinja file");

  write(dir_ / "chat_template.jinja", "line one\n{% if %}");
  try {
    ChatTemplate::find_in_model_dir(dir_);
    FAIL() << "a broken template was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("chat_template.jinja: line 2"), std::string::npos) << e.message();
  }
}

TEST_F(textChatTemplate, BuiltinNamesAndFiles) {
  const auto names = ChatTemplate::builtin_names();
  for (const char* name : {"internlm2", "llama3", "llama2", "qwen", "chatml", "mistral", "vicuna", "base"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;

  EXPECT_EQ(ChatTemplate::builtin("base").render(conversation()), "Be brief.Hi!");
  EXPECT_EQ(ChatTemplate::builtin("chatml").render(conversation()),
            "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\n");
  ChatTemplateInput no_system = conversation();
  no_system.messages.erase(no_system.messages.begin());
  EXPECT_EQ(ChatTemplate::builtin("qwen").render(no_system),
            "<s><|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!"
            "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate::builtin("llama3").render(conversation()),
            "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ChatTemplate::builtin("mistral").render(conversation()), "<s>[INST] Be brief.\n\nHi! [/INST]");

  try {
    ChatTemplate::from_option("no-such-template");
    FAIL() << "an unknown name was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.hint().find("internlm2, llama3, llama2, qwen, chatml, mistral, vicuna, base"),
              std::string::npos)
        << e.hint();
  }
  write(dir_ / "mine.jinja", "{% for m in messages %}[{{ m.role }}]{% endfor %}");
  EXPECT_EQ(ChatTemplate::from_option((dir_ / "mine.jinja").string()).render(conversation()),
            "[system][user]");
}

TEST_F(textChatTemplate, MessagesAsTheTemplateSeesThem) {
  const auto tmpl = ChatTemplate::from_source(
      "{% for m in messages %}{{ m.content is defined }},{{ m.content is none }},"
      "{{ m.tool_calls is defined }},{{ m.tool_call_id }};{% endfor %}{{ tools is none }}",
      "probe");
  ChatTemplateInput input;
  input.messages = {
      ChatMessage::from_json({{"role", "assistant"},
                              {"content", nullptr},
                              {"tool_calls", ordered_json::parse(R"([{"id": "1", "type": "function",
                                  "function": {"name": "f", "arguments": {"a": 1}}}])")}}),
      ChatMessage::from_json({{"role", "tool"}, {"content", "42"}, {"tool_call_id", "1"}}),
      ChatMessage::from_json({{"role", "assistant"}})};
  EXPECT_EQ(tmpl.render(input), "True,True,True,;True,False,False,1;False,False,False,;True");

  const auto content_parts = ChatTemplate::builtin("chatml");
  input.messages = {ChatMessage::from_json(ordered_json::parse(
      R"({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]})"))};
  input.add_generation_prompt = false;
  EXPECT_EQ(content_parts.render(input), "<|im_start|>user\nab<|im_end|>\n");

  EXPECT_THROW(ChatMessage::from_json({{"content", "no role"}}), Error);
  EXPECT_THROW(ChatMessage::from_json({{"role", "user"}, {"content", 5}}), Error);
  EXPECT_THROW(ChatMessage::from_json({{"role", "user"}, {"tool_calls", "x"}}), Error);
}

}  // namespace
}  // namespace tessera::text
