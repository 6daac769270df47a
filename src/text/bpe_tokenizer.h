// BpeTokenizer: a Hugging Face tokenizer.json pipeline with a BPE model.
//
//   text -> added tokens split out -> normalizer -> pre-tokenizer -> BPE per word
//        -> post-processor's special tokens around the ids
//   ids  -> pieces -> decoder chain -> text
//
// Today the components of the SentencePiece-style BPE of Llama 2 are built
// (Prepend/Replace normalizers or Metaspace, byte fallback, the
// Replace/ByteFallback/Fuse/Strip decoder). Byte-level BPE (Llama 3, Qwen)
// plugs in as more component types; this class does not change.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "text/added_vocabulary.h"
#include "text/bpe_model.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

namespace tessera::text {

class BpeTokenizer final : public Tokenizer {
 public:
  // Builds the tokenizer from a parsed tokenizer.json; `source` names it in
  // errors. `config` (tokenizer_config.json, possibly empty) supplies the BOS
  // and EOS tokens and may switch them on or off.
  static std::unique_ptr<BpeTokenizer> from_json(const nlohmann::json& tokenizer_json, const TokenizerConfig& config,
                                                 const std::string& source);

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::string id_to_piece(int32_t id) const override;
  std::optional<int32_t> piece_to_id(std::string_view piece) const override;
  bool is_special(int32_t id) const override;

 private:
  BpeTokenizer() = default;
  // Encodes one span of text between raw-matched added tokens.
  void encode_span(std::string_view span, bool at_start, std::vector<int32_t>& ids) const;
  const std::string* find_piece(int32_t id) const;

  BpeModel model_;
  AddedVocabulary added_;
  std::unique_ptr<Normalizer> normalizer_;       // null: text unchanged
  std::unique_ptr<PreTokenizer> pre_tokenizer_;  // null: the whole span is one word
  std::unique_ptr<Decoder> decoder_;             // null: pieces joined by spaces (HF)
  SpecialTokenTemplate special_template_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  int32_t vocab_size_ = 0;
};

}  // namespace tessera::text
