// Request: what a client asks the engine for, in token ids (the engine never
// sees text). The server fills it from the OpenAI body; the engine validates it
// on submit (see validate in request.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "engine/sampler.h"
#include "engine/token_constraint.h"

namespace tessera::engine {

using RequestId = uint64_t;
using Clock = std::chrono::steady_clock;

enum class FinishReason {
  kStop,    // an eos id or one of the request's stop ids was sampled (and is the last token), or the constraint is done
  kLength,  // max_tokens reached, or the session length
  kAbort,   // aborted by the client, or the engine stopped
  kError,   // the step that carried it failed, or the engine became unhealthy
};

const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error" (OpenAI's words)

struct Request {
  RequestId id = 0;                        // assigned by Engine::submit
  std::vector<int32_t> prompt;             // [num_prompt_tokens], not empty
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;           // end generation (finish kStop) when sampled, besides eos
  int64_t max_tokens = std::numeric_limits<int64_t>::max();  // new tokens at most; the session length caps it too
  int64_t min_tokens = 0;                  // eos and stop ids are masked until this many new tokens exist
  bool ignore_eos = false;                 // eos ids neither stop nor are masked
  bool logprobs = false;                   // report each sampled token's logprob
  int32_t top_logprobs = 0;                // and this many alternatives (0..20)
  // >= 0: report the model's logprob of each prompt token after the first
  // (the raw distribution, before any sampling parameter) with this many
  // alternatives (0..20); such a request's prompt is always computed (never
  // taken from the prefix cache) and at most kPromptLogitsChunk tokens a step.
  int32_t prompt_logprobs = -1;
  // An earlier request with the same prompt (another of n choices), or 0:
  // this one is admitted once that one has computed its prompt and takes its
  // full blocks instead of computing them again, with prefix caching on or
  // off. An id no longer (or never) in the engine means nothing.
  RequestId shares_prompt_with = 0;
  // Structured output: what the output may be (engine/token_constraint.h),
  // this request's own (each of n choices has its own); null: anything.
  std::shared_ptr<TokenConstraint> constraint;
  Clock::time_point arrival = Clock::now();
};

// Throws Error(kInvalidArgument) naming the field. `session_len` bounds the prompt.
void validate(const Request& request, int64_t session_len, int64_t vocab_size);

}  // namespace tessera::engine
