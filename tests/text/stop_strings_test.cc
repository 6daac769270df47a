// StopStringMatcher against a plain reference (the text fed one byte at a
// time, stopped at the first complete stop string), with the text cut into
// chunks at every boundary: single cuts everywhere, bytes one by one, and
// random chunkings.
#include <gtest/gtest.h>

#include <random>

#include "text/stop_strings.h"

namespace tessera::text {
namespace {

struct Expected {
  std::string text;
  std::optional<size_t> stop_index;
};

Expected reference(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t end = 1; end <= text.size(); ++end) {
    std::optional<size_t> found;
    size_t start = 0;
    for (size_t i = 0; i < stops.size(); ++i) {
      const std::string& stop = stops[i];
      if (stop.empty() || stop.size() > end || text.compare(end - stop.size(), stop.size(), stop) != 0) continue;
      if (!found || end - stop.size() < start) {
        found = i;
        start = end - stop.size();
      }
    }
    if (found) return {text.substr(0, start), found};
  }
  return {text, std::nullopt};
}

// Feeds `text` cut at `cuts` (sorted offsets); checks each step; returns the outcome.
Expected run(const std::string& text, const std::vector<std::string>& stops, const std::vector<size_t>& cuts) {
  StopStringMatcher matcher(stops);
  size_t max_stop = 0;
  for (const auto& stop : stops) max_stop = std::max(max_stop, stop.size());
  Expected out;
  size_t previous = 0;
  std::vector<size_t> bounds = cuts;
  bounds.push_back(text.size());
  for (const size_t cut : bounds) {
    const auto result = matcher.feed(std::string_view(text).substr(previous, cut - previous));
    previous = cut;
    out.text += result.text;
    if (result.stop_index) {
      out.stop_index = result.stop_index;
      EXPECT_TRUE(matcher.stopped());
      EXPECT_EQ(matcher.feed("more text").text, "");
      EXPECT_EQ(matcher.finish(), "");
      return out;
    }
    // Everything fed is either out or held, and what is held is shorter than every stop string.
    EXPECT_EQ(out.text.size() + matcher.held(), cut);
    EXPECT_LT(matcher.held(), std::max<size_t>(max_stop, 1));
  }
  out.text += matcher.finish();
  return out;
}

void check_all_chunkings(const std::string& text, const std::vector<std::string>& stops, std::mt19937& rng) {
  const Expected expected = reference(text, stops);
  const auto check = [&](const std::vector<size_t>& cuts) {
    const Expected got = run(text, stops, cuts);
    EXPECT_EQ(got.text, expected.text) << "text \"" << text << "\"";
    EXPECT_EQ(got.stop_index, expected.stop_index) << "text \"" << text << "\"";
  };
  check({});
  for (size_t cut = 0; cut <= text.size(); ++cut) check({cut});
  std::vector<size_t> every(text.size());
  for (size_t i = 0; i < text.size(); ++i) every[i] = i;
  check(every);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<size_t> cuts;
    for (size_t i = 0; i <= text.size(); ++i)
      if (rng() % 3 == 0) cuts.push_back(i);
    check(cuts);
  }
}

TEST(textStopStringMatcher, Examples) {
  StopStringMatcher matcher({"<|end|>", "\n\nUser:"});
  EXPECT_EQ(matcher.feed("Hello <").text, "Hello ");  // "<" may start "<|end|>"
  EXPECT_EQ(matcher.feed("b>").text, "<b>");          // it did not
  EXPECT_EQ(matcher.feed(" done<|en").text, " done");
  const auto result = matcher.feed("d|> ignored");
  EXPECT_EQ(result.text, "");
  EXPECT_EQ(result.stop_index, 0u);

  StopStringMatcher none({});
  EXPECT_EQ(none.feed("any text").text, "any text");
  EXPECT_EQ(none.finish(), "");

  StopStringMatcher held({"STOP"});
  EXPECT_EQ(held.feed("the end ST").text, "the end ");
  EXPECT_EQ(held.finish(), "ST");  // the stream ended: held text is output after all

  // UTF-8: a stop string of multi-byte characters, cut inside them.
  StopStringMatcher chinese({"\xE3\x80\x82"});  // "。"
  EXPECT_EQ(chinese.feed("\xE8\xAE\xB2").text, "\xE8\xAE\xB2");
  const auto stop = chinese.feed("\xE6\x95\x85\xE3\x80\x82\xE4\xBA\x8B");
  EXPECT_EQ(stop.text, "\xE6\x95\x85");
  EXPECT_EQ(stop.stop_index, 0u);

  // The stop string complete first wins, whatever the chunks.
  for (const std::string chunk : {"abcd", "ab"}) {
    StopStringMatcher first({"abcd", "bc"});
    auto r = first.feed(chunk);
    if (!r.stop_index) r = first.feed(std::string("abcd").substr(chunk.size()));
    EXPECT_EQ(r.stop_index, 1u);
  }
}

TEST(textStopStringMatcher, EveryChunkBoundaryMatchesTheReference) {
  std::mt19937 rng(42);
  const std::vector<std::vector<std::string>> stop_sets = {
      {"<|im_end|>"},
      {"\n\n", "User:"},
      {"aab", "ab", "b"},
      {"abab", "bab"},
      {"", "xyz"},
      {"\xE3\x80\x82", "\xF0\x9F\x98\x80!"},
      {"stop", "sto", "top"},
  };
  const std::vector<std::string> texts = {
      "Hello world<|im_end|> trailing",
      "no stop string here at all",
      "<|im_<|im_end|>",
      "first line\n\nUser: hi",
      "aaab",
      "ababab",
      "xxyxyz",
      "\xE8\xAE\xB2\xE6\x95\x85\xE4\xBA\x8B\xE3\x80\x82 \xF0\x9F\x98\x80!",
      "sstotop stop",
      "",
  };
  for (const auto& stops : stop_sets) {
    for (const auto& text : texts) check_all_chunkings(text, stops, rng);
  }
  // Random texts over a small alphabet make partial matches frequent.
  const std::string alphabet = "abt<|>\n";
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> stops(rng() % 3 + 1);
    for (auto& stop : stops) {
      stop.resize(rng() % 4 + 1);
      for (char& c : stop) c = alphabet[rng() % alphabet.size()];
    }
    std::string text(rng() % 24, ' ');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    check_all_chunkings(text, stops, rng);
  }
}

}  // namespace
}  // namespace tessera::text
