// Sampling for one step: each sampling chunk's logits row goes through its own
// sequence's Sampler (and so its own random generator), with its history for
// the penalties and its min_tokens masks. Runs on the engine thread.
#pragma once

#include <vector>

#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/step_plan.h"

namespace tessera::engine {

// One result per chunk with `sample`, in plan order.
std::vector<SampleResult> sample_step(const StepPlan& plan, const StepOutput& output, Scheduler& scheduler);

}  // namespace tessera::engine
