// The built-in demo model: a small Llama with deterministic pseudo-random
// weights, so `make demo` works with no download. It speaks nonsense; it is
// there to show the whole path (load, tokenize, generate, serve) working.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tessera::model {

// Writes model.safetensors, config.json and generation_config.json for a demo
// model over a tokenizer of `vocab_size` pieces (bos 1, eos 2). The same bytes
// on every machine: the weights come from a fixed-seed generator defined here.
void write_demo_model(const std::filesystem::path& out_dir, int64_t vocab_size);

// The shape of a random Llama (the demo model's, or a benchmark's).
struct RandomLlamaShape {
  int64_t hidden = 128, layers = 4, heads = 4, kv_heads = 2, intermediate = 344, vocab = 512, context = 4096;
  int64_t silence_first_ids = 0;  // ids [0, n) get zero LM-head rows (never the likeliest)
  DType dtype = DType::kF32;      // of the stored tensors (config.json's torch_dtype)
  double rope_theta = 10000.0;
  double dynamic_ntk_factor = 0.0;    // > 0: rope_scaling {type: dynamic, factor}
  std::vector<int64_t> eos_ids = {2};  // bos is 1
  int64_t parameter_count() const;
};

// The shape of a named random model (model/random_weights.h: internlm2_5-7b,
// internlm2_5-20b, 100m) as a Llama, stored in bf16.
RandomLlamaShape random_llama_shape(const std::string& name);

// A Llama of `shape` with fixed-seed uniform weights scaled by fan-in.
// Each tensor is made in f32 and stored in shape.dtype at once, so a 7B shape
// in bf16 needs about its 15 GB of host memory.
void write_random_llama(const std::filesystem::path& out_dir, const RandomLlamaShape& shape, uint64_t seed);

}  // namespace tessera::model
