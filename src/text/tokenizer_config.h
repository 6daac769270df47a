// TokenizerConfig: what tessera reads from a model's tokenizer_config.json.
//
// transformers keeps the special tokens and the add_bos/add_eos switches
// there, and they override what tokenizer.json's post-processor says (as
// LlamaTokenizerFast does). The chat template joins this struct when chat
// templates are implemented.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::text {

struct TokenizerConfig {
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> pad_token;
  // Absent when the file has none or the "no limit" value (1e30) transformers writes.
  std::optional<int64_t> model_max_length;
};

// Parses a tokenizer_config.json document; `source` names it in errors.
TokenizerConfig parse_tokenizer_config(const nlohmann::json& json, const std::string& source);

// Reads `path`. Throws Error(kInvalidArgument) naming the file when it cannot be parsed.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& path);

}  // namespace tessera::text
