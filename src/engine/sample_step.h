// Sampling for one step: each sampling chunk's logits row goes through its own
// sequence's Sampler (and so its own random generator), with its history for
// the penalties and its min_tokens masks — or, on a device that samples, the
// same rule there (device_sampling_batch). Runs on the engine thread (and, for
// steps of 8 rows or more of a vocabulary of 4096 or more, on its OpenMP threads).
#pragma once

#include <optional>
#include <vector>

#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/step_plan.h"

namespace tessera::engine {

// For an executor that samples on its device: one row per sampling chunk, in
// plan order (its parameters, its penalties, logit_bias and min_tokens masks
// as edits, a structured output's allowed ids from its constraint's current
// state, made when the sampler calls make_allowed, and the uniform number its
// request's generator draws for it);
// nullopt, drawing nothing, when a chunk asks for logprobs or prompt logprobs (they need the
// logits on the host). `vocab`: the logits rows' size. Call after
// schedule(), before execute().
std::optional<backend::SamplingBatch> device_sampling_batch(const StepPlan& plan, Scheduler& scheduler, int64_t vocab);

// The prompt logprobs a step's all_logits chunks give: per request, the prompt
// tokens not reported before, in order (and marks them reported).
struct PromptLogprobs {
  RequestId id = 0;
  std::vector<PromptTokenLogprob> tokens;
};
std::vector<PromptLogprobs> prompt_logprobs_step(const StepPlan& plan, const StepOutput& output, Scheduler& scheduler);

// One result per chunk with `sample`, in plan order; output.token_ids, when
// filled, are taken as the sampled tokens. A constrained sequence's
// constraint takes its token either way.
std::vector<SampleResult> sample_step(const StepPlan& plan, const StepOutput& output, Scheduler& scheduler);

}  // namespace tessera::engine
