// Sampling for one step: each sampling chunk's logits row goes through its own
// sequence's Sampler (and so its own random generator), with its history for
// the penalties and its min_tokens masks. Runs on the engine thread (and, for
// steps of 8 rows or more of a vocabulary of 4096 or more, on its OpenMP threads).
#pragma once

#include <vector>

#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/step_plan.h"

namespace tessera::engine {

// Marks the sampling chunks whose Sampler is plain greedy this step (temperature
// 0, no penalties, no masked ids, no logprobs), so an executor may return
// argmax ids rather than logits. Call after schedule(), before execute().
void mark_greedy_chunks(StepPlan& plan, Scheduler& scheduler);

// One result per chunk with `sample`, in plan order; output.token_ids, when
// filled, are taken as the greedy tokens.
std::vector<SampleResult> sample_step(const StepPlan& plan, const StepOutput& output, Scheduler& scheduler);

}  // namespace tessera::engine
