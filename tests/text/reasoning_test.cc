// Reasoning split out of an answer: the whole-answer split on hand-built
// cases, and the streaming reader against it with the text cut at every
// boundary.
#include <gtest/gtest.h>

#include "text/reasoning.h"

namespace tessera::text {
namespace {

constexpr ReasoningFormat kThink = ReasoningFormat::kThinkTags;

void expect_split(std::string_view text, const std::string& reasoning, const std::string& content) {
  ReasoningText split = split_reasoning(kThink, text);
  EXPECT_EQ(split.reasoning, reasoning) << text;
  EXPECT_EQ(split.content, content) << text;
}

TEST(Reasoning, SplitsAtTheClosingTag) {
  expect_split("<think>\nLet me add: 4.\n</think>\n\nIt is 4.", "\nLet me add: 4.\n", "\n\nIt is 4.");
  // The template opened the tag: the answer starts inside the thinking.
  expect_split("2 and 2 make 4.</think>It is 4.", "2 and 2 make 4.", "It is 4.");
  // Cut short while thinking: all reasoning.
  expect_split("<think>Hmm, first", "Hmm, first", "");
  // Only the first closing tag ends the thinking; a later <think> is content.
  expect_split("a</think>b</think><think>c", "a", "b</think><think>c");
  expect_split("", "", "");
}

TEST(Reasoning, Names) {
  EXPECT_EQ(reasoning_format_from_name("deepseek-r1"), kThink);
  EXPECT_EQ(reasoning_format_from_name("qwen-qwq"), kThink);
  EXPECT_EQ(reasoning_format_from_name("gpt-oss"), std::nullopt);
}

ReasoningText stream(std::string_view text, const std::vector<size_t>& cuts) {
  ReasoningStream reader(kThink);
  ReasoningText out;
  auto add = [&](const ReasoningText& piece) {
    out.reasoning += piece.reasoning;
    out.content += piece.content;
  };
  size_t from = 0;
  for (size_t cut : cuts) {
    add(reader.feed(text.substr(from, cut - from)));
    from = cut;
  }
  add(reader.feed(text.substr(from)));
  add(reader.finish());
  return out;
}

TEST(ReasoningStream, EqualsTheWholeSplitAtEveryCut) {
  for (std::string_view text : {"<think>\nLet me add: 4.\n</think>\n\nIt is 4.", "2 and 2 </thin make 4.</think>It",
                                "<think>Hmm, first", "<thi", "<thinking aloud> is not the tag</think>ok",
                                "a</think>b</think><think>c"}) {
    const ReasoningText want = split_reasoning(kThink, text);
    std::vector<size_t> bytes;
    for (size_t cut = 1; cut < text.size(); ++cut) {
      const ReasoningText got = stream(text, {cut});
      EXPECT_EQ(got.reasoning, want.reasoning) << text << " cut at " << cut;
      EXPECT_EQ(got.content, want.content) << text << " cut at " << cut;
      bytes.push_back(cut);
    }
    const ReasoningText got = stream(text, bytes);
    EXPECT_EQ(got.reasoning, want.reasoning) << text << " byte by byte";
    EXPECT_EQ(got.content, want.content) << text << " byte by byte";
  }
}

TEST(ReasoningStream, HoldsAPartialTag) {
  ReasoningStream reader(kThink);
  EXPECT_EQ(reader.feed("<th").reasoning, "");
  EXPECT_EQ(reader.feed("ink>so</th").reasoning, "so");
  ReasoningText last = reader.feed("ink>done");
  EXPECT_EQ(last.reasoning, "");
  EXPECT_EQ(last.content, "done");
  EXPECT_EQ(reader.feed(" more").content, " more");
}

}  // namespace
}  // namespace tessera::text
