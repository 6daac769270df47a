// Writes a SentencePiece-style BPE vocabulary as the tokenizer.json and
// tokenizer_config.json a Hugging Face Llama 2 directory has, so converted
// and built-in models load through the same path as downloaded ones (and
// HF's tokenizers library can check them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::text {

struct SentencePieceBpe {
  // By id, "▁" where SentencePiece marks a space; byte pieces are "<0xXX>".
  std::vector<std::string> pieces;
  // (left id, right id) of each merge, highest priority first.
  std::vector<std::pair<int32_t, int32_t>> merges;
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  std::optional<int64_t> model_max_length;
};

// Writes out_dir/tokenizer.json and out_dir/tokenizer_config.json (creating
// out_dir). The tokenizer adds BOS and not EOS, like Llama 2's. Throws
// Error(kInvalidArgument) when the files cannot be written.
void write_sentencepiece_bpe(const SentencePieceBpe& tokenizer, const std::filesystem::path& out_dir);

}  // namespace tessera::text
