// The InternLM2 conversation end to end: the real InternLM2.5 chat template
// renders it and the real InternLM2 tokenizer.model, with the chat models'
// added tokens, encodes the prompt. The expected text is jinja2's and the
// expected ids are PyPI sentencepiece's with transformers' added-token overlay
// (tests/python/test_chat_template_ids.py computes them again from the
// reference libraries and compares).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "../test_paths.h"
#include "real_tokenizers.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tessera::text {
namespace {

constexpr const char* kTemplate = "chat_templates/internlm-internlm2_5-7b-chat.jinja";
constexpr const char* kModel = "tokenizers/internlm2/tokenizer.model";

TEST(textInternLM2Conversation, RendersAndEncodesAsTheReferenceLibraries) {
  TESSERA_REQUIRE_TESTDATA(kTemplate);
  TESSERA_REQUIRE_TESTDATA(kModel);
  std::ifstream in(testing::testdata_dir() / kTemplate, std::ios::binary);
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  ChatTemplateInput input;
  input.messages = {ChatMessage::from_json({{"role", "user"}, {"content", "Hello! What's your name?"}}),
                    ChatMessage::from_json({{"role", "assistant"}, {"content", "My name is InternLM2!"}}),
                    ChatMessage::from_json({{"role", "user"}, {"content", "Nice to meet you InternLM2!"}})};
  input.add_generation_prompt = true;
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  const std::string prompt = ChatTemplate::from_source(source, "internlm2.5").render(input);
  EXPECT_EQ(prompt,
            "<s><|im_start|>user\nHello! What's your name?<|im_end|>\n"
            "<|im_start|>assistant\nMy name is InternLM2!<|im_end|>\n"
            "<|im_start|>user\nNice to meet you InternLM2!<|im_end|>\n"
            "<|im_start|>assistant\n");

  const auto dir = testing::internlm2_dir();
  ASSERT_TRUE(dir.has_value());
  const auto tokenizer = load_tokenizer(*dir);
  // The template writes <s> itself, so no special tokens are added again.
  const std::vector<int32_t> ids = tokenizer->encode(prompt, false);
  const std::vector<int32_t> expected = {
      1,     92543, 1008,  364, 9843,  346,   3716, 725,   829,   963,   345,   92542, 364,   92543, 525,
      11353, 364,   5211,  963, 505,   4576,  11146, 314,  346,   92542, 364,   92543, 1008,  364,   44501,
      442,   3531,  629,   4576, 11146, 314,   346,   92542, 364, 92543, 525,   11353, 364};
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tokenizer->decode(ids, false), prompt);
  EXPECT_EQ(tokenizer->decode(ids, true),
            "user\nHello! What's your name?\nassistant\nMy name is InternLM2!\n"
            "user\nNice to meet you InternLM2!\nassistant\n");
}

}  // namespace
}  // namespace tessera::text
