// Generation for one sequence: prefill the prompt, then decode token by token
// through the paged cache, with no scheduler. The command line's `generate`
// uses it, and the engine's tests use it as the reference a batched request
// must equal token for token (same Sampler, same penalties). Where the model
// samples on its device (Transformer::samples_on_device) each token is
// sampled there, as the engine's steps are.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "model/transformer.h"

namespace tessera::engine {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  int64_t block_size = 64;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // the new tokens, the stop token included
  FinishReason finish_reason = FinishReason::kLength;  // kStop or kLength
};

// `on_token` (optional) sees each new token as soon as it is sampled.
GenerateResult generate(model::Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace tessera::engine
