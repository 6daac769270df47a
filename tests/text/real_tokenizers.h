// Model directories for the real tokenizers of the shared test data, built in
// a temporary folder: InternLM2's tokenizer.model with its tokenizer_config.json
// added tokens, Llama 2's tokenizer.model, and Qwen2's vocab.json + merges.txt
// written as the tokenizer.json transformers' Qwen2TokenizerFast produces.
// Each returns nullopt when its test data is absent.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "../test_paths.h"

namespace tessera::testing {

inline std::filesystem::path real_tokenizer_root() {
  return std::filesystem::temp_directory_path() / ("tessera_real_tokenizers_" + std::to_string(::getpid()));
}

// Removes the folder when the test program exits.
inline struct RealTokenizerCleanup {
  ~RealTokenizerCleanup() {
    std::error_code ignored;
    std::filesystem::remove_all(real_tokenizer_root(), ignored);
  }
} real_tokenizer_cleanup;

inline std::optional<std::filesystem::path> sentencepiece_dir(const std::string& name, const std::string& config) {
  namespace fs = std::filesystem;
  const fs::path model = testdata_dir() / "tokenizers" / name / "tokenizer.model";
  if (!fs::exists(model)) return std::nullopt;
  const fs::path dir = real_tokenizer_root() / name;
  fs::create_directories(dir);
  fs::copy_file(model, dir / "tokenizer.model", fs::copy_options::overwrite_existing);
  if (!config.empty()) std::ofstream(dir / "tokenizer_config.json") << config;
  return dir;
}

inline std::optional<std::filesystem::path> internlm2_dir() {
  std::string added;
  const std::pair<int, const char*> tokens[] = {{0, "<unk>"},           {1, "<s>"},
                                                {2, "</s>"},            {92538, "<|plugin|>"},
                                                {92539, "<|interpreter|>"}, {92540, "<|action_end|>"},
                                                {92541, "<|action_start|>"}, {92542, "<|im_end|>"},
                                                {92543, "<|im_start|>"}};
  nlohmann::json decoder = nlohmann::json::object();
  for (const auto& [id, content] : tokens) {
    decoder[std::to_string(id)] = {{"content", content}, {"lstrip", false}, {"normalized", false},
                                   {"rstrip", false},    {"single_word", false}, {"special", true}};
  }
  const nlohmann::json config = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"},
                                 {"add_bos_token", true}, {"added_tokens_decoder", decoder}};
  return sentencepiece_dir("internlm2", config.dump());
}

inline std::optional<std::filesystem::path> llama2_dir() { return sentencepiece_dir("llama2", ""); }

inline std::optional<std::filesystem::path> qwen2_dir() {
  namespace fs = std::filesystem;
  const fs::path source = testdata_dir() / "tokenizers" / "qwen2";
  if (!fs::exists(source / "vocab.json") || !fs::exists(source / "merges.txt")) return std::nullopt;
  std::ifstream vocab_in(source / "vocab.json");
  const nlohmann::json vocab = nlohmann::json::parse(vocab_in);
  nlohmann::json merges = nlohmann::json::array();
  std::ifstream merges_in(source / "merges.txt");
  for (std::string line; std::getline(merges_in, line);) {
    if (!line.empty() && !line.starts_with("#version")) merges.push_back(line);
  }
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                                     {"use_regex", false}};
  const auto added = [](int id, const char* content) {
    return nlohmann::json{{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  const char* pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const nlohmann::json tokenizer = {
      {"added_tokens", {added(151643, "<|endoftext|>"), added(151644, "<|im_start|>"), added(151645, "<|im_end|>")}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          byte_level}}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"unk_token", nullptr}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}}},
  };
  const fs::path dir = real_tokenizer_root() / "qwen2";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  return dir;
}

}  // namespace tessera::testing
