// Conversion of llama2.c's tokenizer.bin (Karpathy's format for the
// TinyStories models, e.g. stories260K's tok512.bin) into a Hugging Face
// tokenizer directory, so those models load like any other.
#pragma once

#include <cstdint>
#include <filesystem>

namespace tessera::text {

// Reads `tokenizer_bin` and writes out_dir/tokenizer.json and
// out_dir/tokenizer_config.json (<unk> 0, <s> 1, </s> 2, add_bos_token).
//
// The file is: int32 max_token_length, then per token float32 score, int32
// length, bytes. It does not record how many tokens it holds: `vocab_size`
// comes from the model checkpoint's header. llama2.c encodes by repeatedly
// merging the adjacent pair whose concatenation scores highest; that is
// written as HF BPE merges ranked by the merged piece's score.
//
// Throws Error(kInvalidArgument) naming the file when it is truncated, holds
// absurd lengths or scores, more or fewer tokens than `vocab_size`, or
// lacks the 256 byte pieces at ids 3..258.
void write_llama2c_tokenizer(const std::filesystem::path& tokenizer_bin, const std::filesystem::path& out_dir,
                             int32_t vocab_size, int64_t model_max_length);

}  // namespace tessera::text
