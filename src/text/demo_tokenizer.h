// The tokenizer of tessera's built-in demo model: a small SentencePiece-style
// BPE vocabulary learned, deterministically, from a short English text kept
// in the source, so the demo needs no download.
#pragma once

#include <cstdint>
#include <filesystem>

namespace tessera::text {

// <unk>, <s>, </s>, the 256 byte pieces, "▁" and printable ASCII, then the
// pieces of the learned merges.
inline constexpr int32_t kDemoVocabSize = 512;

// Writes out_dir/tokenizer.json and out_dir/tokenizer_config.json; the same
// bytes on every run.
void write_demo_tokenizer(const std::filesystem::path& out_dir, int64_t model_max_length = 2048);

}  // namespace tessera::text
