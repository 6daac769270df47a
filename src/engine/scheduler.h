// Scheduler: which tokens of which sequences the next step computes.
//
// Policy (one step):
//  1. Running sequences, in admission order, each get their remaining tokens
//     (one for a decode, a chunk for a prompt) under the token budget. A
//     prompt chunk leaves one token of budget for every running sequence after
//     it, so a long prompt never starves the decodes.
//  2. When a running sequence's next blocks do not fit, the newest running
//     sequence is preempted (recompute: its blocks are freed, num_computed_tokens
//     goes back to 0, it returns to the front of the waiting queue) until they
//     fit — possibly the sequence itself.
//  3. If nothing was preempted, waiting sequences are admitted first come first
//     served while the batch (max_batch_size), the budget and the blocks allow;
//     the first that does not fit stops admission (no overtaking). An admitted
//     sequence first takes its cached prefix (kv prefix caching), then a chunk.
//     Another choice of a prompt (Request::shares_prompt_with) is passed over
//     until its leader has computed the prompt, then takes the leader's full
//     blocks, so n choices compute their prompt once, caching on or off.
// Invariants: every running sequence holds blocks for [0, num_computed_tokens);
// waiting sequences hold none; the plan's token count <= the budget; the number
// of running sequences <= max_batch_size.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "engine/stop_checker.h"
#include "kv/kv_cache_manager.h"

namespace tessera::engine {

struct SchedulerConfig {
  int64_t max_batch_size = 128;           // running sequences at most (--max-batch-size)
  int64_t max_num_batched_tokens = 8192;  // tokens per step (--max-prefill-token-num)
};

// What a step did to one sampling sequence.
struct SequenceUpdate {
  RequestId id = 0;
  SampleResult sample;
  std::optional<FinishReason> finish;
  bool stop_token = false;  // finish kStop by the sampled token: an eos or stop id, not part of the text
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, const StopConfig& stop, kv::KvCacheManager& kv);

  const StopConfig& stop_config() const { return stop_; }

  // Joins the back of the waiting queue.
  void add(std::unique_ptr<Sequence> seq);
  // Takes a sequence out wherever it is and frees its blocks; nullptr if unknown.
  std::unique_ptr<Sequence> remove(RequestId id);
  Sequence* find(RequestId id);
  std::vector<RequestId> ids() const;

  StepPlan schedule();

  // After a successful step: the chunks' tokens are computed (their full blocks
  // published to the prefix cache); each sampling chunk appends its token from
  // `sampled` (one per sampling chunk, plan order). Finished sequences are
  // removed and their blocks freed.
  std::vector<SequenceUpdate> update(const StepPlan& plan, const std::vector<SampleResult>& sampled);

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  bool empty() const { return sequences_.empty(); }

 private:
  void preempt(Sequence* seq, StepPlan& plan);
  void add_chunk(StepPlan& plan, const Sequence& seq, int64_t num_new) const;
  // The sequence `seq` shares its prompt with (Request::shares_prompt_with), if still here.
  const Sequence* prompt_leader(const Sequence& seq) const;
  // Whether a waiting `seq` stays waiting this step: its leader has not computed its prompt yet.
  bool waits_for_leader(const Sequence& seq) const;
  // The computed blocks a newly admitted `seq` starts from: the prefix cache's
  // match or its leader's blocks, whichever covers more (none when scoring).
  kv::PrefixMatch starting_blocks(const Sequence& seq) const;

  SchedulerConfig config_;
  StopConfig stop_;
  kv::KvCacheManager& kv_;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order; the back is the newest
};

}  // namespace tessera::engine
