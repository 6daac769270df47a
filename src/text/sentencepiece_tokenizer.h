// SentencePieceTokenizer: a model directory's tokenizer.model, through the
// SentencePiece library, with the added-token overlay transformers' slow
// tokenizers (LlamaTokenizer, InternLM2Tokenizer) lay over it.
//
//   text -> added tokens of tokenizer_config.json's added_tokens_decoder split
//           out of the raw text -> each span between them encoded by SentencePiece
//           -> BOS / EOS as add_bos_token / add_eos_token say (defaults: BOS only)
//   ids  -> pieces (an added token's content replaces the model's piece: InternLM2's
//           92543 is "[UNUSED_TOKEN_146]" in the model, "<|im_start|>" in the config)
//        -> "▁" to " ", byte pieces joined into UTF-8, the leading space of the text
//           dropped when the model adds a dummy prefix
//
// Decode is that of LlamaTokenizerFast (the tokenizer.json transformers converts a
// tokenizer.model into): it equals the slow tokenizer's except around kept special
// tokens ("<s> Hello", where the slow one writes "<s>Hello"), and a run of byte
// pieces that is not valid UTF-8 becomes one U+FFFD per byte.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "text/added_vocabulary.h"
#include "text/decoder.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tessera::text {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads `model_file` with `config` (tokenizer_config.json, possibly empty).
  // Throws Error(kInvalidArgument) naming the file when it is not a SentencePiece
  // model, or when the config names a token the vocabulary lacks.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::filesystem::path& model_file,
                                                      const TokenizerConfig& config);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::string id_to_piece(int32_t id) const override;
  std::optional<int32_t> piece_to_id(std::string_view piece) const override;
  bool is_special(int32_t id) const override;

 private:
  SentencePieceTokenizer();
  const std::string* find_added(int32_t id) const;
  void encode_span(std::string_view span, bool at_start, std::vector<int32_t>& ids) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  // The same model with its dummy prefix switched off, for spans after the
  // first when the config says legacy: false; null otherwise.
  std::unique_ptr<sentencepiece::SentencePieceProcessor> no_prefix_processor_;
  AddedVocabulary added_;
  std::unique_ptr<Decoder> decoder_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  bool add_bos_ = true;
  bool add_eos_ = false;
  int32_t model_size_ = 0;
  int32_t vocab_size_ = 0;
};

}  // namespace tessera::text
