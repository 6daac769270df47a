#include "engine/sample_step.h"

#include "core/error.h"

namespace tessera::engine {

void mark_greedy_chunks(StepPlan& plan, Scheduler& scheduler) {
  for (ScheduledChunk& chunk : plan.chunks) {
    chunk.greedy = false;
    if (!chunk.sample) continue;
    const Sequence* seq = scheduler.find(chunk.id);
    if (seq == nullptr) continue;
    const SamplingParams& p = seq->sampler.params();
    chunk.greedy = p.temperature <= 0.0f && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
                   p.frequency_penalty == 0.0f && !seq->request.logprobs && seq->request.top_logprobs == 0 &&
                   masked_ids(*seq, scheduler.stop_config()).empty();
  }
}

std::vector<SampleResult> sample_step(const StepPlan& plan, const StepOutput& output, Scheduler& scheduler) {
  std::vector<SampleResult> results;
  const int64_t rows = plan.num_sampling();
  if (rows == 0) return results;
  if (!output.token_ids.empty()) {
    TESSERA_CHECK(static_cast<int64_t>(output.token_ids.size()) == rows);
    for (const ScheduledChunk& chunk : plan.chunks) TESSERA_CHECK(!chunk.sample || chunk.greedy);
    for (int32_t id : output.token_ids) results.push_back({id});
    return results;
  }
  const Tensor& logits = output.logits;
  TESSERA_CHECK(logits.defined() && logits.rank() == 2 && logits.dim(0) == rows);
  const int64_t vocab = logits.dim(1);
  int64_t row = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (!chunk.sample) continue;
    Sequence* seq = scheduler.find(chunk.id);
    TESSERA_CHECK(seq != nullptr);
    const std::vector<int32_t> masked = masked_ids(*seq, scheduler.stop_config());
    SampleInputs inputs{seq->prompt(), seq->output(), masked, seq->request.logprobs, seq->request.top_logprobs};
    results.push_back(seq->sampler.sample({logits.data<float>() + row * vocab, static_cast<size_t>(vocab)}, inputs));
    ++row;
  }
  return results;
}

}  // namespace tessera::engine
