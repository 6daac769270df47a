// CpuExecutor: a StepPlan through model::Transformer::forward on the CPU
// backend, over a paged cache of `num_blocks` blocks of `block_size` tokens.
#pragma once

#include "engine/executor.h"
#include "model/transformer.h"

namespace tessera::engine {

class CpuExecutor : public Executor {
 public:
  // `model` must outlive the executor.
  CpuExecutor(model::Transformer& model, int64_t num_blocks, int64_t block_size);

  StepOutput execute(const StepPlan& plan) override;
  int64_t vocab_size() const override { return model_.spec().vocab_size; }
  bool samples_on_device() const override { return device_sampling_; }

 private:
  model::Transformer& model_;
  backend::PagedKvCache cache_;
  // Steps sample on the device where the backend can (not on the CPU backend,
  // where the logits are already host memory); TESSERA_GPU_SAMPLING=0 turns it off.
  bool device_sampling_ = false;
};

// Whether an executor of `model` samples on its device: where the model can
// (Transformer::samples_on_device) unless TESSERA_GPU_SAMPLING=0.
bool device_sampling_wanted(const model::Transformer& model);

// The forward batch of a plan: chunks in order, block tables padded with 0 to
// the longest (padding is never read: attention stops at each sequence's length).
model::ForwardBatch make_forward_batch(const StepPlan& plan);

}  // namespace tessera::engine
