// TokenizerConfig: what tessera reads from a model's tokenizer_config.json.
//
// transformers keeps the special tokens and the add_bos/add_eos switches
// there, and they override what tokenizer.json's post-processor says (as
// LlamaTokenizerFast does). For a tokenizer.model directory it also holds the
// added tokens (added_tokens_decoder) laid over the SentencePiece vocabulary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/added_vocabulary.h"

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
  // LlamaTokenizer's "legacy": absent or true gives every span between added
  // tokens SentencePiece's dummy prefix; false gives it only to the text's start.
  std::optional<bool> legacy;
  // "added_tokens_decoder" (id -> token), in file order. The tokens of a
  // tokenizer.model directory that transformers matches before SentencePiece
  // sees the text; `normalized` is read but every token is matched in the raw
  // text, as transformers' slow tokenizers do.
  std::vector<AddedToken> added_tokens;
};

// Parses a tokenizer_config.json document; `source` names it in errors.
TokenizerConfig parse_tokenizer_config(const nlohmann::json& json, const std::string& source);

// Reads `path`. Throws Error(kInvalidArgument) naming the file when it cannot be parsed.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& path);

}  // namespace tessera::text
