// Byte-level BPE pieces: GPT-2's byte table, lossy UTF-8 as Rust and Python
// do it, Split's behaviors (the examples of HF's documentation), NFC, and the
// real Qwen2 vocabulary. Exact ids against the `tokenizers` library are
// checked in tests/python/test_tokenizer_byte_level.py.
#include <gtest/gtest.h>

#include "core/error.h"
#include "real_tokenizers.h"
#include "text/byte_level.h"
#include "text/json_field.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera::text {
namespace {

TEST(textByteLevel, TableIsGpt2s) {
  EXPECT_EQ(to_byte_level(" "), "\u0120");   // Ġ
  EXPECT_EQ(to_byte_level("\n"), "\u010A");  // Ċ
  EXPECT_EQ(to_byte_level("a!~"), "a!~");
  EXPECT_EQ(to_byte_level("\xAD"), "\u0143");  // the soft hyphen is not printable: Ń
  EXPECT_EQ(to_byte_level("\xE8\xAE\xB2"), "\u00E8\u00AE\u00B2");
  for (int byte = 0; byte < 256; ++byte) {
    const std::string one(1, static_cast<char>(byte));
    EXPECT_EQ(from_byte_level(to_byte_level(one)), one) << byte;
  }
  EXPECT_EQ(from_byte_level("<|im_start|>"), "<|im_start|>");
  EXPECT_EQ(from_byte_level("\u4f60"), std::nullopt);
}

TEST(textByteLevel, LossyUtf8ReplacesMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("plain \xE8\xAE\xB2"), "plain \xE8\xAE\xB2");
  EXPECT_EQ(utf8_lossy("\xE8\xAE"), r);             // a truncated sequence is one replacement
  EXPECT_EQ(utf8_lossy("\xE8\xAE" "A"), r + "A");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), r);
  EXPECT_EQ(utf8_lossy("\x80\x80"), r + r);          // stray continuation bytes, one each
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);  // a surrogate: E D's second byte is out of range
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);          // overlong
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(utf8_lossy("\xFF" "a\xC3\xA9"), r + "a\xC3\xA9");
}

std::vector<std::string> split_with(const nlohmann::json& spec, const std::string& text) {
  const auto pre = make_pre_tokenizer(JsonField(spec, "test"));
  std::vector<std::string> words;
  pre->split(text, true, words);
  return words;
}

TEST(textSplitPreTokenizer, Behaviors) {
  // HF's documentation: pattern "-" on "the-final--countdown".
  const auto split = [](const char* behavior, bool invert = false) {
    return split_with({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}},
                      "the-final--countdown");
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Removed"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split("Removed", true), (V{"-", "-", "-"}));
  // A literal pattern is not a regex.
  EXPECT_EQ(split_with({{"type", "Split"}, {"pattern", {{"String", "a.b"}}}, {"behavior", "Removed"}}, "xa.bya-b"),
            (V{"x", "ya-b"}));
  // GPT-2's ByteLevel split, with the prefix space.
  EXPECT_EQ(split_with({{"type", "ByteLevel"}, {"add_prefix_space", true}}, "Hello  world's 42!"),
            (V{"\u0120Hello", "\u0120", "\u0120world", "'s", "\u012042", "!"}));
}

TEST(textUnicodeNormalizer, NfcComposesAndNfkcFolds) {
  const auto nfc = make_normalizer(JsonField(nlohmann::json{{"type", "NFC"}}, "test"));
  EXPECT_EQ(nfc->normalize("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(nfc->normalize("\u212b"), "\u00c5");       // Angstrom sign -> Å
  EXPECT_EQ(nfc->normalize("\uff21"), "\uff21");       // NFC keeps full-width letters
  const auto nfkc = make_normalizer(JsonField(nlohmann::json{{"type", "NFKC"}}, "test"));
  EXPECT_EQ(nfkc->normalize("\uff21\u2460"), "A1");
  const auto nfd = make_normalizer(JsonField(nlohmann::json{{"type", "NFD"}}, "test"));
  EXPECT_EQ(nfd->normalize("\u00e9"), "e\u0301");
}

TEST(textByteLevel, RealQwen2Vocabulary) {
  const auto dir = testing::qwen2_dir();
  if (!dir) GTEST_SKIP() << "tokenizers/qwen2 not found under " << testing::testdata_dir();
  const auto tokenizer = load_tokenizer(*dir);
  EXPECT_EQ(tokenizer->vocab_size(), 151646);
  EXPECT_EQ(tokenizer->piece_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tokenizer->encode("Hello world", true), (std::vector<int32_t>{9707, 1879}));
  const std::vector<int32_t> chat = tokenizer->encode("<|im_start|>user\nhi<|im_end|>", true);
  EXPECT_EQ(chat.front(), 151644);
  EXPECT_EQ(chat.back(), 151645);
  EXPECT_EQ(tokenizer->decode(chat, true), "user\nhi");
  for (const std::string text : {"def f(x):\n    return x  # ok\n", "\xE8\xAE\xB2\xE6\x95\x85\xE4\xBA\x8B \xF0\x9F\x98\x80",
                                 "  many   spaces  ", "I'LL say it's 12345"}) {
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, true), true), text);
  }
  EXPECT_EQ(tokenizer->decode(tokenizer->encode("cafe\u0301", true), true), "caf\u00e9");  // NFC
}

}  // namespace
}  // namespace tessera::text
