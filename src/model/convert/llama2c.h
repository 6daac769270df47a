// llama2.c checkpoints (Karpathy's run.c format) into a Hugging Face Llama
// model directory: model.safetensors, config.json, generation_config.json.
// The tokenizer files are written by the text layer (write_llama2c_tokenizer).
#pragma once

#include <cstdint>
#include <filesystem>

namespace tessera::model {

struct Llama2cHeader {
  int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;  // a negative vocab_size in the file means an extra classifier matrix
};

// Converts `checkpoint` into `out_dir` (created if needed). Returns the header,
// whose vocab_size the tokenizer conversion needs. Throws Error(kInvalidArgument)
// naming the file when it is truncated or its header is impossible.
Llama2cHeader convert_llama2c_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out_dir);

}  // namespace tessera::model
