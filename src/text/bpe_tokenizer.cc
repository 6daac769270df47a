#include "text/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

std::vector<AddedToken> parse_added_tokens(const JsonField& root) {
  std::vector<AddedToken> tokens;
  const auto list = root.find("added_tokens");
  if (!list) return tokens;
  for (size_t i = 0; i < list->array_size(); ++i) {
    const JsonField item = list->at(i);
    AddedToken token;
    const int64_t id = item.at("id").as_int();
    if (id < 0 || id > INT32_MAX) item.at("id").fail("token id out of range");
    token.id = static_cast<int32_t>(id);
    token.content = item.at("content").as_string();
    token.special = item.bool_or("special", false);
    token.normalized = item.bool_or("normalized", !token.special);  // HF's default
    token.lstrip = item.bool_or("lstrip", false);
    token.rstrip = item.bool_or("rstrip", false);
    token.single_word = item.bool_or("single_word", false);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

BpeModel parse_model(const JsonField& root) {
  const JsonField model = root.at("model");
  // Files written by early tokenizers versions leave out the BPE model's type.
  const std::string type = model.string_or("type", model.value().contains("merges") ? "BPE" : "");
  if (type != "BPE") model.unsupported("model", type.empty() ? "(none)" : type);
  return BpeModel::from_json(model);
}

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_json(const nlohmann::json& tokenizer_json,
                                                      const TokenizerConfig& config, const std::string& source) {
  const JsonField root(tokenizer_json, source);
  if (!tokenizer_json.is_object()) root.fail("expected a JSON object");
  std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer());
  tokenizer->model_ = parse_model(root);
  tokenizer->added_ = AddedVocabulary(parse_added_tokens(root));
  if (const auto spec = root.find("normalizer")) tokenizer->normalizer_ = make_normalizer(*spec);
  if (const auto spec = root.find("pre_tokenizer")) tokenizer->pre_tokenizer_ = make_pre_tokenizer(*spec);
  if (const auto spec = root.find("decoder")) tokenizer->decoder_ = make_decoder(*spec);
  if (const auto spec = root.find("post_processor")) tokenizer->special_template_ = parse_post_processor(*spec);
  // "truncation" and "padding" are ignored: the server, not the tokenizer, limits lengths.

  int32_t size = tokenizer->model_.size();
  for (const AddedToken& token : tokenizer->added_.tokens()) size = std::max(size, token.id + 1);
  tokenizer->vocab_size_ = size;

  const auto resolve = [&](const std::optional<std::string>& name, const char* field) -> std::optional<int32_t> {
    if (!name) return std::nullopt;
    const auto id = tokenizer->piece_to_id(*name);
    if (!id) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} \"{}\" of tokenizer_config.json is not in the vocabulary of {}", field, *name, source),
                  "tokenizer_config.json and tokenizer.json must come from the same model");
    }
    return id;
  };
  tokenizer->bos_id_ = resolve(config.bos_token, "bos_token");
  tokenizer->eos_id_ = resolve(config.eos_token, "eos_token");
  // As in LlamaTokenizerFast, explicit add_bos_token / add_eos_token replace
  // the post-processor's prefix / suffix.
  const auto override_side = [&](std::optional<bool> add, std::optional<int32_t> id, const char* field,
                                 std::vector<int32_t>& side) {
    if (!add) return;
    if (*add && !id) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("tokenizer_config.json sets {} but names no such token", field),
                  "add the bos_token / eos_token entry to tokenizer_config.json");
    }
    side = *add ? std::vector<int32_t>{*id} : std::vector<int32_t>{};
  };
  override_side(config.add_bos_token, tokenizer->bos_id_, "add_bos_token", tokenizer->special_template_.prefix);
  override_side(config.add_eos_token, tokenizer->eos_id_, "add_eos_token", tokenizer->special_template_.suffix);
  for (const auto* side : {&tokenizer->special_template_.prefix, &tokenizer->special_template_.suffix}) {
    for (const int32_t id : *side) {
      if (id >= size) root.at("post_processor").fail(fmt::format("special token id {} is past the vocabulary", id));
    }
  }
  return tokenizer;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special) const {
  if (const auto bad = find_invalid_utf8(text)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("text to tokenize is not valid UTF-8 (byte {})", *bad));
  }
  std::vector<int32_t> ids;
  if (add_special) ids = special_template_.prefix;
  std::vector<TextSpan> spans;
  added_.split(text, /*normalized_tokens=*/false, spans);
  for (const TextSpan& span : spans) {
    if (span.id) {
      ids.push_back(*span.id);
    } else {
      encode_span(span.text, span.offset == 0, ids);
    }
  }
  if (add_special) ids.insert(ids.end(), special_template_.suffix.begin(), special_template_.suffix.end());
  return ids;
}

void BpeTokenizer::encode_span(std::string_view span, bool at_start, std::vector<int32_t>& ids) const {
  const std::string normalized = normalizer_ ? normalizer_->normalize(std::string(span)) : std::string(span);
  std::vector<TextSpan> pieces;
  added_.split(normalized, /*normalized_tokens=*/true, pieces);
  std::vector<std::string> words;
  for (const TextSpan& piece : pieces) {
    if (piece.id) {
      ids.push_back(*piece.id);
      continue;
    }
    words.clear();
    if (pre_tokenizer_) {
      pre_tokenizer_->split(std::string(piece.text), at_start && piece.offset == 0, words);
    } else {
      words.emplace_back(piece.text);
    }
    for (const std::string& word : words) model_.encode_word(word, ids);
  }
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string* piece = find_piece(id);
    if (piece == nullptr || (skip_special && is_special(id))) continue;
    pieces.push_back(*piece);
  }
  std::string text;
  if (decoder_) {
    decoder_->decode_chain(pieces);
    for (const std::string& piece : pieces) text += piece;
  } else {
    for (size_t i = 0; i < pieces.size(); ++i) text += (i == 0 ? "" : " ") + pieces[i];
  }
  return text;
}

const std::string* BpeTokenizer::find_piece(int32_t id) const {
  if (const AddedToken* token = added_.find_id(id)) return &token->content;
  return model_.id_to_piece(id);
}

std::string BpeTokenizer::id_to_piece(int32_t id) const {
  const std::string* piece = find_piece(id);
  if (piece == nullptr) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("token id {} is not in the vocabulary (size {})", id, vocab_size_));
  }
  return *piece;
}

std::optional<int32_t> BpeTokenizer::piece_to_id(std::string_view piece) const {
  if (const AddedToken* token = added_.find_content(piece)) return token->id;
  return model_.piece_to_id(piece);
}

bool BpeTokenizer::is_special(int32_t id) const {
  const AddedToken* token = added_.find_id(id);
  return token != nullptr && token->special;
}

}  // namespace tessera::text
