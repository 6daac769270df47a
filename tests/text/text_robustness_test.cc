// Seeded random inputs into every part of the text layer that takes outside
// input: bytes (invalid UTF-8 included) into encode of every tokenizer, id
// sequences (out-of-range ids included) into decode and the incremental
// detokenizer, text into the stop-string matcher, templates into the Jinja
// parser and interpreter. Nothing may crash or throw anything but
// tessera::Error, and the properties of tests/fuzz/text_targets.h hold. The
// same functions back the libFuzzer target (tests/fuzz), which searches
// further than these fixed seeds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../fuzz/text_targets.h"
#include "real_tokenizers.h"
#include "text/chat_templates_builtin.h"
#include "text/demo_tokenizer.h"
#include "text/llama2c_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

struct Named {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
};

// The demo tokenizer always; stories260K's tok512 (converted to a
// SentencePiece-style tokenizer.json) and the real tokenizers when the test
// data is present.
const std::vector<Named>& tokenizers() {
  static const std::vector<Named> all = [] {
    std::vector<Named> result;
    const fs::path root = testing::real_tokenizer_root();
    write_demo_tokenizer(root / "demo");
    result.push_back({"demo", load_tokenizer(root / "demo")});
    const fs::path tok512 = testing::testdata_dir() / "models" / "stories260K" / "tok512.bin";
    if (fs::exists(tok512)) {
      write_llama2c_tokenizer(tok512, root / "tok512", 512, 512);
      result.push_back({"tok512", load_tokenizer(root / "tok512")});
    }
    for (const auto& [name, dir] : {std::pair{"internlm2", testing::internlm2_dir()},
                                    std::pair{"llama2", testing::llama2_dir()},
                                    std::pair{"qwen2", testing::qwen2_dir()}}) {
      if (dir) result.push_back({name, load_tokenizer(*dir)});
    }
    return result;
  }();
  return all;
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < 96; ++i) {
    out += digits[static_cast<unsigned char>(bytes[i]) >> 4];
    out += digits[static_cast<unsigned char>(bytes[i]) & 15];
  }
  return bytes.size() > 96 ? out + "..." : out;
}

// Runs `body`; anything thrown (tessera::Error is handled inside the targets)
// fails the test with the input.
template <typename Body>
void expect_survives(const std::string& what, const std::string& input, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " on input " << hex(input) << ": " << e.what();
  } catch (...) {
    ADD_FAILURE() << what << " on input " << hex(input) << ": a non-std exception";
  }
}

std::string random_bytes(std::mt19937& rng, size_t max_length) {
  std::string out(rng() % (max_length + 1), '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xFF);
  return out;
}

// Text-like input: fragments that exercise the tokenizers' edges, valid or not.
std::string random_text(std::mt19937& rng) {
  static const std::vector<std::string> fragments = {
      "Hello", " world", "  ", "   ", "\n", "\r\n", "\t", "\xe8\xae\xb2", "\xe4\xb8\x89\xe5\x9b\xbd",
      "\xf0\x9f\x98\x80", "\xe2\x96\x81", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<|endoftext|>",
      "<|", "|>", "<", "123", "4567", "'s", "'ll", "caf\xc3\xa9", "e\xcc\x81", "\xef\xbc\xa1", "\xe3\x80\x80",
      "\xc2\xa0", "\xe2\x80\x8d", std::string("\0", 1), "\xff", "\xe8\xae", "\xed\xa0\x80", "\xc0\x80",
      "\xf4\x90\x80\x80", "\x80", "def f(x):", "{}", "[]", "\\", "\"", "#"};
  std::string out;
  for (size_t n = rng() % 24; n > 0; --n) out += fragments[rng() % fragments.size()];
  return out;
}

TEST(textRobustness, EncodeSurvivesRandomBytes) {
  for (const Named& t : tokenizers()) {
    std::mt19937 rng(101);
    for (int i = 0; i < 400; ++i) {
      const std::string input = (i % 2) ? random_bytes(rng, 200) : random_text(rng);
      expect_survives(t.name + " encode", input, [&] { fuzz::encode_bytes(*t.tokenizer, input); });
    }
  }
}

TEST(textRobustness, DecodeAndStreamingSurviveRandomIds) {
  for (const Named& t : tokenizers()) {
    std::mt19937 rng(202);
    for (int i = 0; i < 1000; ++i) {
      const std::string input = random_bytes(rng, 120);
      expect_survives(t.name + " decode", input,
                      [&] { fuzz::decode_ids(*t.tokenizer, fuzz::ids_from_bytes(*t.tokenizer, input)); });
    }
  }
}

// Answers as each format writes its calls (one to three, after some
// content), a third of them damaged (cut short, or a piece of markup put in
// anywhere), and answers of random markup pieces; all cut into chunks (0x01)
// at random places.
std::string random_answer(std::mt19937& rng, ToolCallFormat format) {
  static const std::vector<std::string> pieces = {
      "<|action_start|>", "<|plugin|>", "<|action_end|>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]",
      "<|python_tag|>", "<think>", "</think>", "{", "}", "[", "]", "\"name\"", ": ", ", ", "\"", "\\", ";", " ",
      "\n", "x", "\xe8\xae\xb2", "<", "<|"};
  static const std::vector<std::string> arguments = {"{}", "{\"x\": 1}", "{\"q\": \"}{\\\"\", \"l\": [1, {}]}",
                                                     "\"{\\\"a\\\": 1}\"", "null"};
  const auto pick = [&](const std::vector<std::string>& from) { return from[rng() % from.size()]; };
  std::string out;
  if (rng() % 2) {
    for (size_t n = rng() % 20; n > 0; --n) out += pick(pieces);
  } else {
    if (format != ToolCallFormat::kLlama3 || rng() % 2) {
      for (size_t n = rng() % 3; n > 0; --n) out += pick({"Sure.", " ", "\n", "<thi", "</think>", "\xe8\xae\xb2"});
    }
    const size_t calls = 1 + rng() % 3;
    if (format == ToolCallFormat::kLlama3 && rng() % 2) out += "<|python_tag|>";
    if (format == ToolCallFormat::kMistral) out += "[TOOL_CALLS][";
    for (size_t i = 0; i < calls; ++i) {
      const std::string call = "{\"name\": \"" + pick({"f", "get_weather", "\xe8\xae\xb2"}) + "\", \"" +
                               pick({"arguments", "parameters"}) + "\": " + pick(arguments) + "}";
      switch (format) {
        case ToolCallFormat::kInternLM: out += "<|action_start|><|plugin|>\n" + call + "<|action_end|>"; break;
        case ToolCallFormat::kQwen: out += "<tool_call>\n" + call + "\n</tool_call>\n"; break;
        case ToolCallFormat::kLlama3: out += (i ? "; " : "") + call; break;
        case ToolCallFormat::kMistral: out += (i ? ", " : "") + call; break;
      }
    }
    if (format == ToolCallFormat::kMistral) out += "]";
    if (rng() % 3 == 0) {
      const size_t at = rng() % (out.size() + 1);
      out = rng() % 2 ? out.substr(0, at) : out.substr(0, at) + pick(pieces) + out.substr(at);
    }
  }
  for (size_t cuts = rng() % 6; cuts > 0; --cuts) out.insert(rng() % (out.size() + 1), "\1");
  return out;
}

TEST(textRobustness, AnswerMarkupSurvivesRandomAnswers) {
  std::mt19937 rng(404);
  int with_calls = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto format = static_cast<ToolCallFormat>(i % 4);
    std::string input = std::string(1, static_cast<char>(i % 4)) + random_answer(rng, format);
    if (i % 20 == 0) input = random_bytes(rng, 80);
    expect_survives("answer markup", input, [&] { fuzz::answer_markup(input); });
    if (input.empty()) continue;
    std::string text = input.substr(1);
    std::erase(text, '\1');
    if (!parse_tool_calls(static_cast<ToolCallFormat>(static_cast<unsigned char>(input[0]) % 4), text).calls.empty()) {
      ++with_calls;
    }
  }
  // Well-formed calls come up often enough for the streamed-equals-whole property to bite.
  EXPECT_GT(with_calls, 4000);
}

TEST(textRobustness, StopStringsSurviveRandomText) {
  std::mt19937 rng(303);
  const std::string alphabet = std::string("ab<|>\xe8\xae\xb2\xc3\xa9", 10) + std::string("\0\1\0\1", 4);
  for (int i = 0; i < 3000; ++i) {
    std::string input(rng() % 40, '\0');
    for (char& c : input) c = alphabet[rng() % alphabet.size()];
    if (i % 10 == 0) input = random_bytes(rng, 60);
    expect_survives("stop strings", input, [&] { fuzz::stop_strings(input); });
  }
}

TEST(textRobustness, JinjaSurvivesRandomTemplates) {
  std::vector<std::string> sources;
  for (const auto& builtin : builtin_chat_templates()) sources.emplace_back(builtin.source);
  const fs::path real = testing::testdata_dir() / "chat_templates";
  if (fs::exists(real)) {
    for (const auto& entry : fs::directory_iterator(real)) {
      std::ifstream in(entry.path(), std::ios::binary);
      sources.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  static const std::vector<std::string> tokens = {
      "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", " if ", " elif ", " else ", " endif ",
      " for ", " in ", " endfor ", " set ", " endset ", " macro ", " endmacro ", " namespace(", " loop.index ",
      " messages ", "message['role']", "message.content", "[0]", "[1:]", "[::-1]", "[-1]", " | trim", " | tojson",
      " | length", " | join(', ')", " | items", " is defined", " is none", " is string", " not ", " and ", " or ",
      " ~ ", " + ", " * ", " // ", " % ", "(", ")", "[", "]", "{", "}", ",", ":", ".", "=", "==", "'a'", "\"b\"",
      "1", "-1", "2.5", "none", "true", "raise_exception('x')", "range(3)", ".startswith('a')", ".split()",
      "\n", " ", "text", "\xe8\xae\xb2", "\\", "'", "\xff"};
  std::mt19937 rng(404);
  for (int i = 0; i < 4000; ++i) {
    std::string source;
    if (i % 3 == 0 || sources.empty()) {
      for (size_t n = rng() % 40; n > 0; --n) source += tokens[rng() % tokens.size()];
    } else {
      source = sources[rng() % sources.size()];
      for (size_t edits = rng() % 4 + 1; edits > 0 && !source.empty(); --edits) {
        const size_t at = rng() % source.size();
        const size_t length = std::min<size_t>(rng() % 16, source.size() - at);
        switch (rng() % 3) {
          case 0: source.erase(at, length); break;
          case 1: source.insert(at, source.substr(rng() % source.size(), length)); break;
          default: source.insert(at, tokens[rng() % tokens.size()]); break;
        }
      }
    }
    expect_survives("jinja", source, [&] { fuzz::render_template(source); });
  }
}

}  // namespace
}  // namespace tessera::text
