// StepPlan: what one engine step computes, as plain data (no pointers into the
// scheduler), so an executor — or, later, every tensor-parallel rank — needs
// nothing else.
#pragma once

#include <cstdint>
#include <vector>

#include <optional>

#include "backend/row_sampling.h"
#include "core/tensor.h"
#include "engine/request.h"

namespace tessera::engine {

// One sequence's share of a step: tokens [start_position, start_position + n).
struct ScheduledChunk {
  RequestId id = 0;
  std::vector<int32_t> token_ids;    // [n] the tokens whose KV this step computes
  int32_t start_position = 0;        // == the sequence's num_computed_tokens
  std::vector<int32_t> block_table;  // [ceil((start_position + n) / block_size)] block ids
  bool sample = false;               // the chunk ends at the last known token: logits wanted
  bool all_logits = false;           // logits of every token wanted (prompt logprobs); the last is the sample row
  int64_t num_logit_rows() const { return all_logits ? static_cast<int64_t>(token_ids.size()) : (sample ? 1 : 0); }
};

// The prompt tokens a step scores for prompt logprobs, all such requests
// together: each brings a logits row of the whole vocabulary (the warm-up
// sizes the workspace for these rows on top of one per sequence).
inline constexpr int64_t kPromptLogitsChunk = 64;

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // running sequences first (admission order), then new ones
  int64_t num_tokens = 0;              // sum of token_ids sizes <= the token budget
  std::vector<RequestId> preempted;    // sent back to the waiting queue while planning
  // Set when the executor samples on its device (Executor::samples_on_device):
  // one row per chunk with `sample`, in plan order, each with its uniform
  // number already drawn from its request's generator; the executor then
  // returns StepOutput::token_ids.
  std::optional<backend::SamplingBatch> device_sampling;

  bool empty() const { return chunks.empty(); }
  int64_t num_sampling() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.sample ? 1 : 0;
    return n;
  }
  int64_t num_logit_rows() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.num_logit_rows();
    return n;
  }
};

// The executor's answer. `logits` has ScheduledChunk::num_logit_rows() rows
// per chunk, in plan order; it may be undefined when no chunk wants any.
struct StepOutput {
  Tensor logits;  // [plan.num_logit_rows(), vocab] host f32
  // Instead of logits, when the plan has device_sampling: each row sampled on
  // the device, so a batch's logits never cross to the host.
  std::vector<int32_t> token_ids;  // [plan.num_sampling()]
};

}  // namespace tessera::engine
