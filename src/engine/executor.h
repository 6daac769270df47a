// Executor: runs a StepPlan on a device and returns logits.
//
// The executor owns the device side of the KV cache (the kv layer owns only
// the metadata: which block ids each sequence uses). It is called from the
// engine thread only. An exception from execute fails the step's requests;
// an Error of kind kDeviceFailure means the device is unusable and stops the
// engine (see engine.h).
#pragma once

#include <cstdint>

#include "engine/step_plan.h"

namespace tessera::engine {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual StepOutput execute(const StepPlan& plan) = 0;
  virtual int64_t vocab_size() const = 0;
  // Whether execute() samples a plan's device_sampling rows itself.
  virtual bool samples_on_device() const { return false; }
};

}  // namespace tessera::engine
