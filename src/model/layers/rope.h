// Rotary position embedding frequencies for every scaling tessera supports,
// following transformers' rope initialisation functions so logits agree.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_spec.h"

namespace tessera::model {

struct RopeFrequencies {
  std::vector<float> inv_freq;    // [head_dim / 2]
  float attention_scaling = 1.0f;  // multiplies cos and sin (YaRN's mscale)
};

// Frequencies for a sequence that holds `seq_len` tokens after this step.
// Only dynamic NTK depends on seq_len: its base grows once seq_len exceeds
// max_position_embeddings, and is applied to the tokens computed in that step.
RopeFrequencies rope_frequencies(const ModelSpec& spec, int64_t seq_len);

// Whether rope_frequencies(spec, seq_len) differs from rope_frequencies(spec, 1).
bool rope_depends_on_length(const ModelSpec& spec, int64_t seq_len);

}  // namespace tessera::model
