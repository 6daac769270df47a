// Generation for one sequence: prefill the prompt, then decode token by token
// through the paged cache. The command line's `generate` and the end-to-end
// tests use it; the serving engine (scheduler, many sequences) builds on the
// same Transformer::forward.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "model/transformer.h"

namespace tessera::engine {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  int64_t block_size = 64;
};

enum class FinishReason { kStop, kLength };

struct GenerateResult {
  std::vector<int32_t> tokens;  // the new tokens, the stop token included
  FinishReason finish_reason = FinishReason::kLength;
};

// `on_token` (optional) sees each new token as soon as it is sampled.
GenerateResult generate(model::Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace tessera::engine
