// A model with random weights made directly on a backend, with no files: what
// benchmarks of large shapes use (writing and reading 15 GB of a 7B model's
// random checkpoint would measure the disk). Layers share the same random
// values but each has its own device copy, so memory traffic is the real one.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/model_spec.h"
#include "model/transformer.h"

namespace tessera::model {

// Known shapes: "100m" (a ~100M-parameter Llama), "internlm2_5-7b" (hidden
// 4096, 32 layers, 32/8 heads, intermediate 14336, vocab 92544: the shape of
// the baseline measurements), "internlm2_5-20b" (hidden 6144, 48 layers, 48/8
// heads, intermediate 16384). Throws Error(kInvalidArgument) listing them.
ModelSpec random_model_spec(const std::string& name);

// A random host 4-bit weight [out, in] (canonical layout) whose values have
// about `stddev`: q uniform in 0..15 around zero points near 8, one scale per
// group of `group_size` inputs.
backend::QuantizedWeight random_quantized_weight(int64_t out, int64_t in, int64_t group_size, double stddev,
                                                 uint64_t seed);

// With `awq_group_size` > 0 the linear layers are random 4-bit weights in
// groups of that size (packed on a backend with a 4-bit kernel, dequantized
// otherwise), as an AWQ checkpoint of the shape would load; the embeddings and
// the LM head stay 16-bit. spec.quantization of the model says so.
std::unique_ptr<Transformer> make_random_transformer(const ModelSpec& spec, backend::Backend& backend, uint64_t seed,
                                                     int64_t awq_group_size = 0);

}  // namespace tessera::model
