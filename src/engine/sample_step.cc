#include "engine/sample_step.h"

#include <algorithm>
#include <exception>

#include "core/error.h"
#include "core/log.h"

namespace tessera::engine {
namespace {

// The ids a constrained sequence may sample next: its constraint's, and the
// end ids (eos and the request's stop ids) where the output may end or where
// the constraint allows nothing (a vocabulary that cannot go on: the output
// ends rather than take a token outside it).
std::vector<uint64_t> allowed_ids(const Sequence& seq, const StopConfig& stop, int64_t vocab) {
  std::vector<uint64_t> bits(static_cast<size_t>((vocab + 63) / 64), 0);
  const TokenConstraint& constraint = *seq.request.constraint;
  constraint.allowed(bits);
  const bool none = std::all_of(bits.begin(), bits.end(), [](uint64_t w) { return w == 0; });
  if (constraint.can_end() || none) {
    const auto allow = [&](int32_t id) {
      if (id >= 0 && id < vocab) bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
    };
    for (int32_t id : seq.request.stop_ids) allow(id);
    if (!seq.request.ignore_eos) {
      for (int32_t id : stop.eos_ids) allow(id);
    }
  }
  return bits;
}

bool is_end_id(const Sequence& seq, const StopConfig& stop, int32_t id) {
  const auto has = [id](const std::vector<int32_t>& ids) { return std::find(ids.begin(), ids.end(), id) != ids.end(); };
  return has(seq.request.stop_ids) || (!seq.request.ignore_eos && has(stop.eos_ids));
}

// A constrained sequence's sampled token into its constraint (an end id ends the output).
void accept_constrained(Sequence& seq, const StopConfig& stop, int32_t token) {
  if (is_end_id(seq, stop, token) || seq.request.constraint->accept(token)) return;
  // Only when every id was masked (min_tokens holding back the end ids of a whole output).
  log_warning("request {}: token {} is outside its structured output; the output ends here", seq.id(), token);
  seq.constraint_broken = true;
}

}  // namespace

std::optional<backend::SamplingBatch> device_sampling_batch(const StepPlan& plan, Scheduler& scheduler, int64_t vocab) {
  std::vector<Sequence*> seqs;
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (chunk.all_logits) return std::nullopt;  // prompt logprobs: the logits come to the host
    if (!chunk.sample) continue;
    Sequence* seq = scheduler.find(chunk.id);
    TESSERA_CHECK(seq != nullptr);
    if (seq->request.logprobs || seq->request.top_logprobs > 0) return std::nullopt;
    seqs.push_back(seq);
  }
  backend::SamplingBatch batch;
  for (Sequence* seq : seqs) {
    const SamplingParams& p = seq->sampler.params();
    const auto row = static_cast<int32_t>(batch.rows.size());
    const std::vector<int32_t> masked = masked_ids(*seq, scheduler.stop_config());
    if (!takes_plain_argmax(p) || !masked.empty()) {
      const SampleInputs inputs{seq->prompt(), seq->output(), masked};
      for (const backend::LogitEdit& e : logit_edits(p, inputs, vocab, row)) batch.edits.push_back(e);
    }
    if (seq->request.constraint) batch.allowed_rows.push_back(row);
    batch.rows.push_back(seq->sampler.device_row());
  }
  if (batch.allowed_rows.empty()) return batch;
  // The structured outputs' masks, applied there and made when the device
  // sampler asks, while the step's forward runs: each costs 0.02-3 ms on a
  // vocabulary of 10^5, so many of them take OpenMP's threads as the host
  // path's rows do. The sequences and the stop config stay put until the
  // step is done.
  std::vector<const Sequence*> constrained;
  for (int32_t row : batch.allowed_rows) constrained.push_back(seqs[static_cast<size_t>(row)]);
  batch.make_allowed = [constrained, &stop = scheduler.stop_config(), vocab](std::vector<uint64_t>& out) {
    const auto words = static_cast<size_t>((vocab + 63) / 64);
    out.assign(constrained.size() * words, 0);
    const auto masks = static_cast<int64_t>(constrained.size());
    std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic) if (masks >= 2 && vocab >= 4096)
    for (int64_t k = 0; k < masks; ++k) {
      try {
        const std::vector<uint64_t> allowed = allowed_ids(*constrained[static_cast<size_t>(k)], stop, vocab);
        std::copy(allowed.begin(), allowed.end(), out.begin() + static_cast<std::ptrdiff_t>(k * words));
      } catch (...) {
#pragma omp critical(tessera_device_masks_failure)
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  };
  return batch;
}

std::vector<PromptLogprobs> prompt_logprobs_step(const StepPlan& plan, const StepOutput& output, Scheduler& scheduler) {
  std::vector<PromptLogprobs> out;
  int64_t row = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    const int64_t rows = chunk.num_logit_rows();
    if (chunk.all_logits) {
      Sequence* seq = scheduler.find(chunk.id);
      TESSERA_CHECK(seq != nullptr && output.logits.defined());
      const int64_t vocab = output.logits.dim(1);
      PromptLogprobs entry{chunk.id, {}};
      // Row r of the chunk, at position start + r, predicts token start + r + 1.
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t next = chunk.start_position + r + 1;
        if (next < seq->prompt_logprobs_done || next >= seq->num_prompt_tokens) continue;
        const std::span<const float> logits(output.logits.data<float>() + (row + r) * vocab, static_cast<size_t>(vocab));
        entry.tokens.push_back(model_logprob(logits, seq->tokens[next], seq->request.prompt_logprobs));
        seq->prompt_logprobs_done = next + 1;
      }
      if (!entry.tokens.empty()) out.push_back(std::move(entry));
    }
    row += rows;
  }
  return out;
}

std::vector<SampleResult> sample_step(const StepPlan& plan, const StepOutput& output, Scheduler& scheduler) {
  std::vector<SampleResult> results;
  const int64_t rows = plan.num_sampling();
  if (rows == 0) return results;
  if (!output.token_ids.empty()) {
    TESSERA_CHECK(static_cast<int64_t>(output.token_ids.size()) == rows);
    TESSERA_CHECK(plan.device_sampling.has_value());
    size_t row = 0;
    for (const ScheduledChunk& chunk : plan.chunks) {
      if (!chunk.sample) continue;
      const int32_t id = output.token_ids[row++];
      results.push_back(SampleResult{id, 0.0f, {}});
      Sequence* seq = scheduler.find(chunk.id);
      TESSERA_CHECK(seq != nullptr);
      if (seq->request.constraint) accept_constrained(*seq, scheduler.stop_config(), id);
    }
    return results;
  }
  const Tensor& logits = output.logits;
  TESSERA_CHECK(logits.defined() && logits.rank() == 2 && logits.dim(0) == plan.num_logit_rows());
  const int64_t vocab = logits.dim(1);
  // Each row has its own sequence, Sampler and generator, so rows are
  // independent and the same tokens come out however they are spread over
  // threads. A row costs tens to hundreds of microseconds on a vocabulary of
  // 10^5 (top_p needs log Σ exp over all of it), which at batch 64 is longer
  // than the GPU's step: big steps sample on OpenMP's threads.
  std::vector<Sequence*> seqs;
  std::vector<std::vector<int32_t>> masked;
  std::vector<int64_t> logits_row;  // each sample's row: a chunk's last
  int64_t end = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    end += chunk.num_logit_rows();
    if (!chunk.sample) continue;
    Sequence* seq = scheduler.find(chunk.id);
    TESSERA_CHECK(seq != nullptr);
    seqs.push_back(seq);
    masked.push_back(masked_ids(*seq, scheduler.stop_config()));
    logits_row.push_back(end - 1);
  }
  results.resize(rows);
  std::exception_ptr failure;  // an exception must not leave the parallel region
  // Small vocabularies (tests, the demo model) cost less than waking the team.
  const bool parallel = rows >= 8 && vocab >= 4096;
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t row = 0; row < rows; ++row) {
    try {
      Sequence* seq = seqs[row];
      SampleInputs inputs{seq->prompt(), seq->output(), masked[row], seq->request.logprobs, seq->request.top_logprobs};
      std::vector<uint64_t> allowed;
      if (seq->request.constraint) {
        allowed = allowed_ids(*seq, scheduler.stop_config(), vocab);
        inputs.allowed = allowed;
      }
      results[row] =
          seq->sampler.sample({logits.data<float>() + logits_row[row] * vocab, static_cast<size_t>(vocab)}, inputs);
      if (seq->request.constraint) accept_constrained(*seq, scheduler.stop_config(), results[row].token);
    } catch (...) {
#pragma omp critical(tessera_sample_step_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace tessera::engine
