#include "text/tokenizer_config.h"

#include "text/json_field.h"

namespace tessera::text {
namespace {

// A special token is written either as a string or as an AddedToken object
// {"content": "<s>", "lstrip": false, ...}; null means none.
std::optional<std::string> token_field(const JsonField& config, std::string_view key) {
  const auto field = config.find(key);
  if (!field) return std::nullopt;
  if (field->value().is_object()) return field->at("content").as_string();
  return field->as_string();
}

std::optional<bool> bool_field(const JsonField& config, std::string_view key) {
  const auto field = config.find(key);
  if (!field) return std::nullopt;
  return field->as_bool();
}

// "added_tokens_decoder": {"92543": {"content": "<|im_start|>", "special": true, ...}, ...}
std::vector<AddedToken> added_tokens_field(const JsonField& config) {
  std::vector<AddedToken> tokens;
  const auto decoder = config.find("added_tokens_decoder");
  if (!decoder) return tokens;
  if (!decoder->value().is_object()) decoder->fail("expected an object of id: token");
  for (const auto& [key, value] : decoder->value().items()) {
    const JsonField item = decoder->member(value, key);
    AddedToken token;
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || id < 0 || id > INT32_MAX) item.fail("expected a token id as the key");
    token.id = static_cast<int32_t>(id);
    if (item.value().is_string()) {
      token.content = item.as_string();
    } else {
      token.content = item.at("content").as_string();
      token.special = item.bool_or("special", false);
      token.normalized = item.bool_or("normalized", !token.special);
      token.lstrip = item.bool_or("lstrip", false);
      token.rstrip = item.bool_or("rstrip", false);
      token.single_word = item.bool_or("single_word", false);
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace

TokenizerConfig parse_tokenizer_config(const nlohmann::json& json, const std::string& source) {
  const JsonField config(json, source);
  if (!json.is_object()) config.fail("expected a JSON object");
  TokenizerConfig result;
  result.add_bos_token = bool_field(config, "add_bos_token");
  result.add_eos_token = bool_field(config, "add_eos_token");
  result.bos_token = token_field(config, "bos_token");
  result.eos_token = token_field(config, "eos_token");
  result.unk_token = token_field(config, "unk_token");
  result.pad_token = token_field(config, "pad_token");
  result.legacy = bool_field(config, "legacy");
  result.added_tokens = added_tokens_field(config);
  if (const auto length = config.find("model_max_length")) {
    const nlohmann::json& value = length->value();
    if (!value.is_number()) length->fail("expected a number");
    // Integers past int64 and floats (1e30) are transformers' way of saying "no limit".
    if (value.is_number_integer() && !(value.is_number_unsigned() && value.get<uint64_t>() > INT64_MAX)) {
      const int64_t max_length = value.get<int64_t>();
      if (max_length <= 0) length->fail("expected a positive length");
      result.model_max_length = max_length;
    }
  }
  return result;
}

TokenizerConfig read_tokenizer_config(const std::filesystem::path& path) {
  return parse_tokenizer_config(read_json_file(path), path.string());
}

}  // namespace tessera::text
