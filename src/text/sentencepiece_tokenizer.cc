#include "text/sentencepiece_tokenizer.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include <fstream>
#include <iterator>

#include "core/error.h"
#include "text/json_field.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;
using sentencepiece::SentencePieceProcessor;

// The model with NormalizerSpec.add_dummy_prefix set to false, as transformers'
// LlamaTokenizer(legacy=False) prepares it. In protobuf's wire format a second
// occurrence of an embedded message merges into the first, so appending
// `normalizer_spec (field 3) { add_dummy_prefix (field 3): false }` to the
// serialized ModelProto is exactly ModelProto.normalizer_spec.MergeFrom.
std::string without_dummy_prefix(std::string serialized) {
  serialized += std::string("\x1A\x02\x18\x00", 4);
  return serialized;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot read {}", path.string()));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::unique_ptr<SentencePieceProcessor> load_processor(const std::string& serialized, const fs::path& path) {
  auto processor = std::make_unique<SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} is not a SentencePiece model: {}", path.string(), status.ToString()),
                "copy tokenizer.model from the model's original repository");
  }
  return processor;
}

std::vector<int> sp_encode(const SentencePieceProcessor& processor, std::string_view text) {
  std::vector<int> ids;
  const auto status = processor.Encode(text, &ids);
  if (!status.ok()) throw Error(ErrorKind::kInternal, fmt::format("SentencePiece encode failed: {}", status.ToString()));
  return ids;
}

// Does the model put "▁" before the text (NormalizerSpec.add_dummy_prefix)?
// Read from its behaviour, since the library does not expose the spec.
bool adds_dummy_prefix(const SentencePieceProcessor& processor) {
  const std::vector<int> ids = sp_encode(processor, "a");
  return !ids.empty() && processor.IdToPiece(ids[0]).starts_with("\u2581");
}

std::unique_ptr<Decoder> make_sentencepiece_decoder(bool strip_leading_space) {
  // LlamaTokenizerFast's decoder, built from its tokenizer.json description.
  nlohmann::json steps = nlohmann::json::array({
      {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}},
  });
  if (strip_leading_space) steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  const nlohmann::json spec = {{"type", "Sequence"}, {"decoders", steps}};
  return make_decoder(JsonField(spec, "SentencePiece decoder"));
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer() = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const fs::path& model_file,
                                                                     const TokenizerConfig& config) {
  std::unique_ptr<SentencePieceTokenizer> tokenizer(new SentencePieceTokenizer());
  const std::string serialized = read_file(model_file);
  tokenizer->processor_ = load_processor(serialized, model_file);
  const SentencePieceProcessor& sp = *tokenizer->processor_;
  tokenizer->model_size_ = sp.GetPieceSize();
  const bool dummy_prefix = adds_dummy_prefix(sp);
  if (config.legacy == false && dummy_prefix) {
    tokenizer->no_prefix_processor_ = load_processor(without_dummy_prefix(serialized), model_file);
    if (adds_dummy_prefix(*tokenizer->no_prefix_processor_)) {
      throw Error(ErrorKind::kInternal, fmt::format("could not switch off the dummy prefix of {}", model_file.string()));
    }
  }
  tokenizer->decoder_ = make_sentencepiece_decoder(dummy_prefix);

  // The config's added tokens, then the model's control and unknown pieces
  // (<s>, </s>, <unk>) as special tokens, as transformers registers them.
  std::vector<AddedToken> added = config.added_tokens;
  std::vector<bool> listed(static_cast<size_t>(tokenizer->model_size_), false);
  int32_t size = tokenizer->model_size_;
  for (AddedToken& token : added) {
    token.normalized = false;  // slow tokenizers match every added token in the raw text
    if (token.id < size) listed[token.id] = true;
    size = std::max(size, token.id + 1);
  }
  for (int32_t id = 0; id < tokenizer->model_size_; ++id) {
    if (!listed[id] && (sp.IsControl(id) || sp.IsUnknown(id))) {
      added.push_back(AddedToken{.id = id, .content = sp.IdToPiece(id), .special = true});
    }
  }
  tokenizer->added_ = AddedVocabulary(std::move(added));
  tokenizer->vocab_size_ = size;

  const auto resolve = [&](const std::optional<std::string>& name, int model_id,
                           const char* field) -> std::optional<int32_t> {
    if (!name) return model_id >= 0 ? std::optional<int32_t>(model_id) : std::nullopt;
    const auto id = tokenizer->piece_to_id(*name);
    if (!id) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} \"{}\" of tokenizer_config.json is not in the vocabulary of {}", field, *name,
                              model_file.string()),
                  "tokenizer_config.json and tokenizer.model must come from the same model");
    }
    return id;
  };
  tokenizer->bos_id_ = resolve(config.bos_token, sp.bos_id(), "bos_token");
  tokenizer->eos_id_ = resolve(config.eos_token, sp.eos_id(), "eos_token");
  tokenizer->add_bos_ = config.add_bos_token.value_or(true);  // LlamaTokenizer's defaults
  tokenizer->add_eos_ = config.add_eos_token.value_or(false);
  if ((tokenizer->add_bos_ && !tokenizer->bos_id_) || (tokenizer->add_eos_ && !tokenizer->eos_id_)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("tokenizer_config.json asks for a BOS or EOS token that {} does not have",
                            model_file.string()),
                "set add_bos_token / add_eos_token to false or name the token in bos_token / eos_token");
  }
  return tokenizer;
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool add_special) const {
  if (const auto bad = find_invalid_utf8(text)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("text to tokenize is not valid UTF-8 (byte {})", *bad));
  }
  std::vector<int32_t> ids;
  if (add_special && add_bos_) ids.push_back(*bos_id_);
  // legacy: false reads a literal "▁" as a space, as LlamaTokenizer.tokenize does.
  const std::string legacy_free = no_prefix_processor_ ? replace_all(text, "\u2581", " ") : std::string();
  const std::string_view source = no_prefix_processor_ ? std::string_view(legacy_free) : text;
  std::vector<TextSpan> spans;
  added_.split(source, /*normalized_tokens=*/false, spans);
  for (const TextSpan& span : spans) {
    if (span.id) {
      ids.push_back(*span.id);
    } else {
      encode_span(span.text, span.offset == 0, ids);
    }
  }
  if (add_special && add_eos_) ids.push_back(*eos_id_);
  return ids;
}

void SentencePieceTokenizer::encode_span(std::string_view span, bool at_start, std::vector<int32_t>& ids) const {
  // Legacy tokenizers give every span the dummy prefix; legacy: false only the first.
  const SentencePieceProcessor& processor = no_prefix_processor_ && !at_start ? *no_prefix_processor_ : *processor_;
  for (const int id : sp_encode(processor, span)) ids.push_back(id);
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* token = added_.find_id(id)) {
      if (!(skip_special && token->special)) pieces.push_back(token->content);
    } else if (id >= 0 && id < model_size_) {
      pieces.push_back(processor_->IdToPiece(id));
    }
  }
  decoder_->decode_chain(pieces);
  std::string text;
  for (const std::string& piece : pieces) text += piece;
  return text;
}

std::string SentencePieceTokenizer::id_to_piece(int32_t id) const {
  if (const AddedToken* token = added_.find_id(id)) return token->content;
  if (id < 0 || id >= model_size_) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("token id {} is not in the vocabulary (size {})", id, vocab_size_));
  }
  return processor_->IdToPiece(id);
}

std::optional<int32_t> SentencePieceTokenizer::piece_to_id(std::string_view piece) const {
  if (const AddedToken* token = added_.find_content(piece)) return token->id;
  const int id = processor_->PieceToId(piece);
  // PieceToId answers the unknown id for a piece it does not have.
  if (id < 0 || processor_->IdToPiece(id) != piece) return std::nullopt;
  return id;
}

bool SentencePieceTokenizer::is_special(int32_t id) const {
  const AddedToken* token = added_.find_id(id);
  return token != nullptr && token->special;
}

}  // namespace tessera::text
