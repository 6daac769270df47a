#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::engine {

Scheduler::Scheduler(const SchedulerConfig& config, const StopConfig& stop, kv::KvCacheManager& kv)
    : config_(config), stop_(stop), kv_(kv) {
  TESSERA_CHECK(config.max_batch_size > 0 && config.max_num_batched_tokens > 0);
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  TESSERA_CHECK(seq && !sequences_.count(seq->id()));
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(seq.get());
  sequences_.emplace(seq->id(), std::move(seq));
}

std::unique_ptr<Sequence> Scheduler::remove(RequestId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return nullptr;
  Sequence* seq = it->second.get();
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  kv_.free(id);
  std::unique_ptr<Sequence> out = std::move(it->second);
  sequences_.erase(it);
  return out;
}

Sequence* Scheduler::find(RequestId id) {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

std::vector<RequestId> Scheduler::ids() const {
  std::vector<RequestId> out;
  for (const auto& [id, seq] : sequences_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

void Scheduler::preempt(Sequence* seq, StepPlan& plan) {
  std::erase(running_, seq);
  kv_.free(seq->id());
  seq->num_computed_tokens = 0;
  seq->status = SequenceStatus::kWaiting;
  ++seq->num_preemptions;
  waiting_.push_front(seq);
  plan.preempted.push_back(seq->id());
}

void Scheduler::add_chunk(StepPlan& plan, const Sequence& seq, int64_t num_new) const {
  ScheduledChunk chunk;
  chunk.id = seq.id();
  chunk.start_position = static_cast<int32_t>(seq.num_computed_tokens);
  chunk.token_ids.assign(seq.tokens.begin() + seq.num_computed_tokens,
                         seq.tokens.begin() + seq.num_computed_tokens + num_new);
  chunk.block_table = kv_.block_table(seq.id());
  chunk.sample = seq.num_computed_tokens + num_new == seq.num_tokens();
  // Row p predicts token p + 1: wanted while that is a prompt token not yet reported.
  chunk.all_logits = seq.wants_prompt_logits() && seq.num_computed_tokens + num_new >= seq.prompt_logprobs_done;
  plan.num_tokens += num_new;
  plan.chunks.push_back(std::move(chunk));
}

const Sequence* Scheduler::prompt_leader(const Sequence& seq) const {
  const RequestId leader = seq.request.shares_prompt_with;
  if (leader == 0 || leader == seq.id()) return nullptr;
  auto it = sequences_.find(leader);
  return it == sequences_.end() ? nullptr : it->second.get();
}

bool Scheduler::waits_for_leader(const Sequence& seq) const {
  if (seq.wants_prompt_logits()) return false;  // its prompt is computed anyway
  const Sequence* leader = prompt_leader(seq);
  return leader != nullptr && !leader->wants_prompt_logits() &&
         leader->num_computed_tokens < leader->num_prompt_tokens;
}

kv::PrefixMatch Scheduler::starting_blocks(const Sequence& seq) const {
  if (seq.wants_prompt_logits()) return kv::PrefixMatch{};  // every prompt token's logits: nothing cached
  kv::PrefixMatch match = kv_.match_prefix(seq.tokens);
  const Sequence* leader = prompt_leader(seq);
  if (leader == nullptr || !kv_.contains(leader->id())) return match;
  // Tokens both have and the leader has computed, leaving one of seq's to compute (its logits are needed).
  const int64_t limit = std::min({leader->num_computed_tokens, leader->num_tokens(), seq.num_tokens() - 1});
  int64_t common = 0;
  while (common < limit && leader->tokens[common] == seq.tokens[common]) ++common;
  kv::PrefixMatch shared = kv_.share_blocks(leader->id(), common, seq.num_tokens());
  return shared.num_tokens > match.num_tokens ? shared : match;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = config_.max_num_batched_tokens;
  int64_t prompt_rows = kPromptLogitsChunk;  // left this step for sequences scoring their prompt

  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    const int64_t later = static_cast<int64_t>(running_.size() - i - 1);
    const int64_t remaining = seq->num_tokens() - seq->num_computed_tokens;
    int64_t n = std::min({remaining, std::max<int64_t>(1, budget - later), budget});
    if (seq->wants_prompt_logits()) {
      if (prompt_rows == 0) continue;  // this step's prompt rows are taken: it goes on next step
      n = std::min(n, prompt_rows);
      prompt_rows -= n;
    }
    bool fits = true;
    while (!kv_.allocate(seq->id(), seq->num_computed_tokens + n)) {
      Sequence* victim = running_.back();
      preempt(victim, plan);
      if (victim == seq) {
        fits = false;
        break;
      }
    }
    if (!fits) break;
    add_chunk(plan, *seq, n);
    budget -= n;
  }

  if (!plan.preempted.empty()) return plan;
  // First come, first served, except that a choice waiting for its leader's
  // prompt lets those behind it go first.
  for (size_t i = 0; i < waiting_.size() && budget > 0 && num_running() < config_.max_batch_size;) {
    Sequence* seq = waiting_[i];
    if (waits_for_leader(*seq)) {
      ++i;
      continue;
    }
    if (seq->wants_prompt_logits() && prompt_rows == 0) break;  // it waits a step, and so do those behind it
    const kv::PrefixMatch match = starting_blocks(*seq);
    int64_t n = std::min(seq->num_tokens() - match.num_tokens, budget);
    if (seq->wants_prompt_logits()) {
      n = std::min(n, prompt_rows);
      prompt_rows -= n;
    }
    if (!kv_.allocate(seq->id(), match.num_tokens + n, &match)) break;
    seq->num_computed_tokens = match.num_tokens;
    seq->status = SequenceStatus::kRunning;
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    running_.push_back(seq);
    add_chunk(plan, *seq, n);
    budget -= n;
  }
  return plan;
}

std::vector<SequenceUpdate> Scheduler::update(const StepPlan& plan, const std::vector<SampleResult>& sampled) {
  std::vector<SequenceUpdate> updates;
  size_t next = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    Sequence* seq = find(chunk.id);
    TESSERA_CHECK(seq != nullptr && seq->num_computed_tokens == chunk.start_position);
    seq->num_computed_tokens += static_cast<int64_t>(chunk.token_ids.size());
    kv_.commit(seq->id(), seq->tokens, seq->num_computed_tokens);
    if (!chunk.sample) continue;
    TESSERA_CHECK(next < sampled.size());
    SequenceUpdate u{seq->id(), sampled[next++], std::nullopt};
    seq->tokens.push_back(u.sample.token);
    u.finish = check_finish(*seq, stop_);
    u.stop_token = u.finish == FinishReason::kStop && ends_with_stop_token(*seq, stop_);
    if (u.finish) remove(seq->id());
    updates.push_back(std::move(u));
  }
  TESSERA_CHECK(next == sampled.size());
  return updates;
}

}  // namespace tessera::engine
