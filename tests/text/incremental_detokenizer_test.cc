// IncrementalDetokenizer on the real tokenizers (InternLM2 and Llama 2
// tokenizer.model, Qwen2 byte-level tokenizer.json) and the demo
// tokenizer.json: whatever the ids, the pieces handed out concatenate to
// decode(all ids), and no piece ends inside an incomplete character.
#include <gtest/gtest.h>

#include <random>

#include "real_tokenizers.h"
#include "text/decoder.h"
#include "text/demo_tokenizer.h"
#include "text/incremental_detokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTexts = {
    "Hello world! How are you today?",
    "  leading spaces and trailing   ",
    "def f(x):\n    return x ** 2  # square\n\n",
    "\xE8\xAE\xB2\xE6\x95\x85\xE4\xBA\x8B\xE7\xBB\x99\xE6\x88\x91\xE5\x90\xAC\xE3\x80\x82",  // 讲故事给我听。
    "emoji \xF0\x9F\x98\x80\xF0\x9F\x90\xB6\xF0\x9F\x8F\xBD and \xE2\x9C\x85 done",
    "caf\xC3\xA9 na\xC3\xAFve \xD0\x96\xD0\xB8\xD0\xBB\xD0\xB8 3.14159 1,000,000",
    "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\nOnce upon a time",
    "<s>after bos</s> after eos",
    "x",
    "",
};

struct Case {
  std::string name;
  std::shared_ptr<Tokenizer> tokenizer;
  int32_t first_byte_id;  // the id of the piece for byte 0x00 (<0x00> or its byte-level character)
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> result;
    const auto add = [&](const std::string& name, const std::optional<fs::path>& dir, int32_t first_byte) {
      if (dir) result.push_back({name, std::shared_ptr<Tokenizer>(load_tokenizer(*dir)), first_byte});
    };
    add("internlm2", testing::internlm2_dir(), 3);
    add("llama2", testing::llama2_dir(), 3);
    add("qwen2", testing::qwen2_dir(), 0);
    const fs::path demo = testing::real_tokenizer_root() / "demo";
    write_demo_tokenizer(demo);
    add("demo", demo, 3);
    return result;
  }();
  return all;
}

// Streams `ids` through a detokenizer; checks every step and returns the joined text.
std::string stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDetokenizer detokenizer(tokenizer, skip_special);
  std::string joined;
  for (const int32_t id : ids) {
    const std::string piece = detokenizer.push(id);
    EXPECT_TRUE(is_valid_utf8(piece));
    joined += piece;
  }
  joined += detokenizer.finish();
  EXPECT_EQ(joined, detokenizer.text());
  return joined;
}

TEST(textIncrementalDetokenizer, RandomIdStreamsJoinToDecode) {
  for (const Case& c : cases()) {
    std::mt19937 rng(1234);
    const int32_t size = c.tokenizer->vocab_size();
    std::vector<int32_t> specials;
    for (int32_t id = 0; id < size && specials.size() < 64; ++id)
      if (c.tokenizer->is_special(id)) specials.push_back(id);
    for (int32_t id = size - 1; id > size - 20000 && id > 0; --id)
      if (c.tokenizer->is_special(id)) specials.push_back(id);
    for (int stream_index = 0; stream_index < 300; ++stream_index) {
      std::vector<int32_t> ids(rng() % 48 + 1);
      for (int32_t& id : ids) {
        const unsigned kind = rng() % 20;
        if (kind < 7) id = static_cast<int32_t>(rng() % size);
        else if (kind < 16) id = c.first_byte_id + static_cast<int32_t>(rng() % 256);
        else if (kind < 18 && !specials.empty()) id = specials[rng() % specials.size()];
        else if (kind < 19) id = c.first_byte_id + 0x80 + static_cast<int32_t>(rng() % 0x40);  // continuation bytes
        else id = (rng() % 2) ? -1 : size + 7;                                                 // ids with no piece
      }
      for (const bool skip : {true, false}) {
        ASSERT_EQ(stream(*c.tokenizer, ids, skip), c.tokenizer->decode(ids, skip))
            << c.name << " stream " << stream_index << " skip_special " << skip;
      }
    }
  }
}

TEST(textIncrementalDetokenizer, RealTextStreamsWithoutReplacementCharacters) {
  for (const Case& c : cases()) {
    for (const std::string& text : kTexts) {
      const std::vector<int32_t> ids = c.tokenizer->encode(text, true);
      for (const bool skip : {true, false}) {
        IncrementalDetokenizer detokenizer(*c.tokenizer, skip);
        std::string joined;
        for (const int32_t id : ids) {
          const std::string piece = detokenizer.push(id);
          EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << c.name << ": " << text;
          joined += piece;
        }
        const std::string rest = detokenizer.finish();
        // Nothing is held back once the last piece is neither a byte piece nor an unfinished character.
        if (!ids.empty() && !parse_byte_piece(c.tokenizer->id_to_piece(ids.back()))) {
          EXPECT_EQ(rest, "") << c.name << ": " << text;
        }
        joined += rest;
        EXPECT_EQ(joined, c.tokenizer->decode(ids, skip)) << c.name << ": " << text;
      }
    }
  }
}

TEST(textIncrementalDetokenizer, ByteFallbackWaitsForTheWholeCharacter) {
  for (const Case& c : cases()) {
    if (c.name != "llama2") continue;
    IncrementalDetokenizer detokenizer(*c.tokenizer, true);
    EXPECT_EQ(detokenizer.push(15043), "Hello");      // "▁Hello": the first space is dropped
    EXPECT_EQ(detokenizer.push(29871), " ");          // "▁"
    EXPECT_EQ(detokenizer.push(3 + 0xE8), "");
    EXPECT_EQ(detokenizer.push(3 + 0xAE), "");
    EXPECT_EQ(detokenizer.push(3 + 0xB2), "");        // a byte piece: the run may go on
    EXPECT_EQ(detokenizer.push(3186), "\xE8\xAE\xB2 world");  // "▁world" ends the run
    EXPECT_EQ(detokenizer.push(2), "");               // </s>, skipped
    EXPECT_EQ(detokenizer.finish(), "");
    EXPECT_EQ(detokenizer.text(), "Hello \xE8\xAE\xB2 world");
  }
  for (const Case& c : cases()) {
    if (c.name != "qwen2") continue;
    // Byte-level: 讲 is E8 AE B2; the first two bytes as single-byte tokens hold it back.
    IncrementalDetokenizer detokenizer(*c.tokenizer, true);
    const std::string e8 = "\u00E8", ae = "\u00AE", b2 = "\u00B2";
    EXPECT_EQ(detokenizer.push(*c.tokenizer->piece_to_id(e8)), "");
    EXPECT_EQ(detokenizer.push(*c.tokenizer->piece_to_id(ae)), "");
    EXPECT_EQ(detokenizer.push(*c.tokenizer->piece_to_id(b2)), "\xE8\xAE\xB2");
    EXPECT_EQ(detokenizer.push(151645), "");  // <|im_end|>, skipped
    EXPECT_EQ(detokenizer.finish(), "");
  }
}

TEST(textIncrementalDetokenizer, KeepsSpecialTokensWhenAsked) {
  for (const Case& c : cases()) {
    if (c.name != "internlm2") continue;
    IncrementalDetokenizer keep(*c.tokenizer, false);
    std::string text;
    for (const int32_t id : c.tokenizer->encode("<|im_start|>assistant\nHi<|im_end|>", false)) text += keep.push(id);
    text += keep.finish();
    EXPECT_EQ(text, "<|im_start|>assistant\nHi<|im_end|>");
  }
}

}  // namespace
}  // namespace tessera::text
