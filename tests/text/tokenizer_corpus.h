// The tokenizer corpus of tests/fixtures/tokenizers (written by
// tools/make_tokenizer_golden.py): its named texts, the large input rebuilt
// from them exactly as the script builds it, and the readers of the golden
// files' compact id form.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../test_paths.h"

namespace tessera::testing {

inline std::filesystem::path tokenizer_fixtures_dir() { return fixtures_dir() / "tokenizers"; }

inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

struct CorpusText {
  std::string name;
  std::string text;
};

inline std::vector<CorpusText> read_corpus() {
  std::vector<CorpusText> texts;
  const nlohmann::json corpus = read_json_file(tokenizer_fixtures_dir() / "corpus.json");
  for (const auto& entry : corpus.at("texts")) {
    texts.push_back({entry.at("name").get<std::string>(), entry.at("text").get<std::string>()});
  }
  return texts;
}

// make_tokenizer_golden.py's large_text(): corpus texts and separators picked
// by a 64-bit LCG until the text holds at least `size` bytes.
inline std::string large_corpus_text(const std::vector<CorpusText>& corpus, size_t size = 100 * 1024,
                                     uint64_t seed = 20240726) {
  static const char* const kSeparators[] = {" ", "\n", "", "  ", "\n\n", "\t"};
  const auto next = [](uint64_t state) { return state * 6364136223846793005ULL + 1442695040888963407ULL; };
  std::string text;
  uint64_t state = seed;
  while (text.size() < size) {
    state = next(state);
    text += corpus[(state >> 33) % corpus.size()].text;
    state = next(state);
    text += kSeparators[(state >> 33) % std::size(kSeparators)];
  }
  return text;
}

inline uint64_t fnv1a64(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char byte : data) h = (h ^ byte) * 0x100000001b3ULL;
  return h;
}

inline std::string base64_decode(std::string_view text) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z') value = c - 'A';
    else if (c >= 'a' && c <= 'z') value = c - 'a' + 26;
    else if (c >= '0' && c <= '9') value = c - '0' + 52;
    else if (c == '+') value = 62;
    else if (c == '/') value = 63;
    else if (c == '=') break;
    else throw std::runtime_error("bad base64");
    bits = (bits << 6) | static_cast<uint32_t>(value);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

// Unsigned LEB128 varints, one per id.
inline std::vector<int32_t> leb128_ids(std::string_view bytes) {
  std::vector<int32_t> ids;
  uint32_t value = 0;
  int shift = 0;
  for (const unsigned char byte : bytes) {
    value |= static_cast<uint32_t>(byte & 0x7F) << shift;
    if (byte & 0x80) {
      shift += 7;
      if (shift > 28) throw std::runtime_error("varint too long");
      continue;
    }
    ids.push_back(static_cast<int32_t>(value));
    value = 0;
    shift = 0;
  }
  if (shift != 0) throw std::runtime_error("truncated varint");
  return ids;
}

}  // namespace tessera::testing
