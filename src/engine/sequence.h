// Sequence: a request inside the engine.
//
// vLLM v1's model: there are no prefill and decode phases. A sequence has
// `tokens` (prompt, then the output so far) and `num_computed_tokens`, the
// prefix whose keys and values are in the cache. A step computes some of the
// rest; when it reaches the last known token the sequence samples one more.
// Prefill, a chunk of a prefill, a decode step and the recompute after a
// preemption are all "compute tokens [num_computed_tokens, num_tokens)".
//
// Invariants: 0 <= num_computed_tokens < num_tokens() while unfinished;
// num_prompt_tokens <= num_tokens(); preemption resets num_computed_tokens to 0
// and keeps the tokens (and the sampler's state), so nothing is sampled twice.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"

namespace tessera::engine {

enum class SequenceStatus { kWaiting, kRunning };

struct Sequence {
  explicit Sequence(Request r)
      : request(std::move(r)), tokens(request.prompt), num_prompt_tokens(static_cast<int64_t>(request.prompt.size())),
        sampler(request.sampling) {}

  RequestId id() const { return request.id; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt() const { return {tokens.data(), static_cast<size_t>(num_prompt_tokens)}; }
  std::span<const int32_t> output() const {
    return {tokens.data() + num_prompt_tokens, static_cast<size_t>(num_output_tokens())};
  }

  Request request;
  std::vector<int32_t> tokens;      // [num_tokens] prompt then output
  int64_t num_prompt_tokens;
  int64_t num_computed_tokens = 0;  // tokens whose KV is cached
  SequenceStatus status = SequenceStatus::kWaiting;
  int64_t num_preemptions = 0;
  // request.prompt_logprobs: prompt tokens [1, prompt_logprobs_done) have had
  // theirs reported (a recompute after a preemption reports none twice).
  int64_t prompt_logprobs_done = 1;
  bool wants_prompt_logits() const {
    return request.prompt_logprobs >= 0 && prompt_logprobs_done < num_prompt_tokens;
  }
  Sampler sampler;                  // owns the request's random generator
  // A sampled token its constraint refused (every id was masked): the output ends.
  bool constraint_broken = false;
};

}  // namespace tessera::engine
