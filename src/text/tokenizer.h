// Tokenizer: text <-> token ids for one model directory.
//
// The interface every tokenizer family implements (Hugging Face tokenizer.json
// pipelines, SentencePiece tokenizer.model). The engine sees only
// ids; the server tokenizes prompts and detokenizes outputs through this.
// Implementations are immutable after loading, so one instance may be used
// from many threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Ids of `text` (UTF-8; invalid UTF-8 throws Error(kInvalidArgument)).
  // `add_special` adds the model's special tokens around it (BOS for Llama),
  // as HF's encode(text, add_special_tokens=True) does.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;

  // Text of `ids`, as HF's decode(ids, skip_special_tokens) gives it: ids
  // with no piece are ignored, byte pieces that do not form valid UTF-8
  // become U+FFFD. `skip_special` drops special tokens (<s>, </s>, ...).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;

  // The largest id + 1 (a model's embedding table may be larger).
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;

  // The vocabulary entry of `id` ("▁the", "<0x0A>", "<s>"). Throws
  // Error(kInvalidArgument) for an id with no piece.
  virtual std::string id_to_piece(int32_t id) const = 0;
  virtual std::optional<int32_t> piece_to_id(std::string_view piece) const = 0;
  // True for added tokens marked special (what decode(skip_special) drops).
  virtual bool is_special(int32_t id) const = 0;
};

// Loads the tokenizer of a model directory: tokenizer.json when present, else
// tokenizer.model (SentencePiece), each with tokenizer_config.json's special
// tokens, added tokens and add_bos/add_eos when present.
// Throws Error(kUnsupported) for a tokenizer.json component tessera does not
// implement, Error(kInvalidArgument) for a missing or malformed file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

}  // namespace tessera::text
