// When a sequence is done, after a token has been appended to it.
//
//   kStop:   the token is one of the request's stop ids, or an eos id (unless
//            ignore_eos). Before min_tokens these ids are masked (masked_ids),
//            so they cannot be sampled and this cannot fire early. Also when
//            the request's constraint is done (a whole structured output).
//   kLength: max_tokens new tokens exist, or the sequence holds session_len
//            tokens (the longest the KV plan allows).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/request.h"
#include "engine/sequence.h"

namespace tessera::engine {

struct StopConfig {
  std::vector<int32_t> eos_ids;  // the model's (config.json / generation_config.json)
  int64_t session_len = 0;       // tokens per sequence, prompt and output
};

std::optional<FinishReason> check_finish(const Sequence& seq, const StopConfig& config);

// The last token is one of the request's stop ids or an eos id (unless
// ignore_eos): a token that ends the output and is not part of its text.
bool ends_with_stop_token(const Sequence& seq, const StopConfig& config);

// Ids the sampler must not pick now: eos (unless ignore_eos) and stop ids while
// fewer than min_tokens new tokens exist; empty afterwards.
std::vector<int32_t> masked_ids(const Sequence& seq, const StopConfig& config);

}  // namespace tessera::engine
