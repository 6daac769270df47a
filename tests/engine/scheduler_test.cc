// Scheduler: chunked prefill under the token budget, decodes never starved,
// first come first served under max_batch_size, preemption by recompute
// (newest first), and prefix-cache hits skipping computed blocks.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "engine/scheduler.h"

namespace tessera::engine {
namespace {

std::vector<int32_t> ids(int32_t first, int64_t count) {
  std::vector<int32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return t;
}

class engineScheduler : public ::testing::Test {
 protected:
  void make(int64_t num_blocks, int64_t block_size, int64_t max_batch, int64_t budget, bool prefix = false) {
    kv_ = std::make_unique<kv::KvCacheManager>(num_blocks, block_size, prefix);
    scheduler_ = std::make_unique<Scheduler>(SchedulerConfig{max_batch, budget}, StopConfig{{}, 1 << 20}, *kv_);
  }
  RequestId add(std::vector<int32_t> prompt, int64_t max_tokens = 100) {
    Request r;
    r.id = next_++;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    scheduler_->add(std::make_unique<Sequence>(r));
    return r.id;
  }
  // Runs one step with token 7 sampled for every sampling chunk.
  StepPlan step() {
    StepPlan plan = scheduler_->schedule();
    std::vector<SampleResult> sampled(plan.num_sampling(), SampleResult{7, 0.0f, {}});
    scheduler_->update(plan, sampled);
    return plan;
  }
  const ScheduledChunk* chunk_of(const StepPlan& plan, RequestId id) {
    for (const auto& c : plan.chunks) {
      if (c.id == id) return &c;
    }
    return nullptr;
  }

  std::unique_ptr<kv::KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  RequestId next_ = 1;
};

TEST_F(engineScheduler, LongPromptIsPrefilledInChunksUnderTheBudget) {
  make(16, 4, 8, 8);
  RequestId a = add(ids(0, 20));
  StepPlan p1 = step(), p2 = step(), p3 = step(), p4 = step();
  EXPECT_EQ(p1.num_tokens, 8);
  EXPECT_FALSE(p1.chunks[0].sample);
  EXPECT_EQ(p2.chunks[0].start_position, 8);
  EXPECT_EQ(p3.chunks[0].start_position, 16);
  EXPECT_EQ(p3.chunks[0].token_ids.size(), 4u);
  EXPECT_TRUE(p3.chunks[0].sample);  // the chunk reaching the last prompt token samples
  EXPECT_EQ(p4.chunks[0].token_ids, std::vector<int32_t>{7});  // then one decode token
  EXPECT_EQ(p4.chunks[0].start_position, 20);
  EXPECT_EQ(p4.chunks[0].block_table.size(), 6u);  // positions 0..20 in 4-token blocks
  EXPECT_EQ(scheduler_->find(a)->num_computed_tokens, 21);
}

TEST_F(engineScheduler, RunningDecodesAreNeverStarvedByALongPrompt) {
  make(64, 4, 8, 8);
  RequestId a = add(ids(0, 3));
  step();  // a prefilled, decoding from now on
  RequestId b = add(ids(100, 40));
  RequestId c = add(ids(200, 2));
  bool c_admitted_before_b_prefilled = false;
  for (int i = 0; i < 8; ++i) {
    StepPlan p = step();
    EXPECT_LE(p.num_tokens, 8);
    ASSERT_NE(chunk_of(p, a), nullptr) << "step " << i;
    EXPECT_EQ(chunk_of(p, a)->token_ids.size(), 1u);
    // First come, first served: c waits until b's prompt is computed.
    if (chunk_of(p, c) && scheduler_->find(b)->num_computed_tokens < 40) c_admitted_before_b_prefilled = true;
  }
  EXPECT_FALSE(c_admitted_before_b_prefilled);
  EXPECT_GE(scheduler_->find(b)->num_computed_tokens, 40);
  EXPECT_GT(scheduler_->find(c)->num_computed_tokens, 0);
}

TEST_F(engineScheduler, AdmitsFirstComeFirstServedUpToTheBatchSize) {
  make(64, 4, 2, 64);
  RequestId a = add(ids(0, 4)), b = add(ids(10, 4)), c = add(ids(20, 4));
  StepPlan p = step();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].id, a);
  EXPECT_EQ(p.chunks[1].id, b);
  EXPECT_EQ(scheduler_->num_waiting(), 1);
  scheduler_->remove(a);
  p = step();
  EXPECT_NE(chunk_of(p, c), nullptr);
}

TEST_F(engineScheduler, NoOvertakingWhenTheHeadDoesNotFit) {
  make(4, 4, 8, 64);
  add(ids(0, 9));                   // 3 blocks
  RequestId big = add(ids(50, 9));  // 3 more: does not fit
  RequestId small = add(ids(90, 2));  // would fit, but must wait behind `big`
  StepPlan p = step();
  EXPECT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(chunk_of(p, big), nullptr);
  EXPECT_EQ(chunk_of(p, small), nullptr);
}

TEST_F(engineScheduler, OutOfBlocksPreemptsTheNewestAndRecomputesItLater) {
  make(4, 4, 8, 64);
  RequestId a = add(ids(0, 7));   // 2 blocks
  RequestId b = add(ids(20, 7));  // 2 blocks: the pool is full
  step();                         // both prefilled: 8 tokens each (7 + the sampled one)
  step();                         // position 7 still in block 1: 9 tokens each
  EXPECT_EQ(kv_->stats().free_blocks, 0);
  // Position 8 needs a third block for each: a gets it by preempting b.
  StepPlan p = step();
  EXPECT_EQ(p.preempted, std::vector<RequestId>{b});
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].id, a);
  const Sequence* sb = scheduler_->find(b);
  EXPECT_EQ(sb->num_computed_tokens, 0);
  EXPECT_EQ(sb->num_tokens(), 9);  // its sampled tokens are kept
  EXPECT_EQ(scheduler_->num_waiting(), 1);
  EXPECT_FALSE(kv_->contains(b));
  // Once a finishes, b recomputes prompt and output in one chunk and samples.
  scheduler_->remove(a);
  p = step();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].id, b);
  EXPECT_EQ(p.chunks[0].start_position, 0);
  EXPECT_EQ(p.chunks[0].token_ids.size(), 9u);
  EXPECT_TRUE(p.chunks[0].sample);
}

TEST_F(engineScheduler, PreemptsTheNewestFirstAndReadmitsInArrivalOrder) {
  make(6, 4, 8, 64);
  add(ids(0, 4), /*max_tokens=*/10);  // a, the oldest: never preempted
  RequestId b = add(ids(10, 4), 10), c = add(ids(20, 4), 6);
  std::vector<std::vector<RequestId>> preemptions;
  std::vector<RequestId> readmitted;  // sequences recomputed from position 0 after a preemption
  for (int i = 0; i < 40 && !scheduler_->empty(); ++i) {
    StepPlan p = step();
    if (!p.preempted.empty()) preemptions.push_back(p.preempted);
    for (const auto& chunk : p.chunks) {
      if (chunk.start_position == 0 && i > 0) readmitted.push_back(chunk.id);
    }
  }
  // Position 8 needs a third block for all three: c (the newest) goes; at
  // position 12 a fourth block for a and b: b goes next. a finishes (max_tokens),
  // then b, preempted last but admitted earlier, comes back before c.
  ASSERT_GE(preemptions.size(), 2u);
  EXPECT_EQ(preemptions[0], std::vector<RequestId>{c});
  EXPECT_EQ(preemptions[1], std::vector<RequestId>{b});
  ASSERT_GE(readmitted.size(), 2u);
  EXPECT_EQ(readmitted[0], b);
  EXPECT_EQ(readmitted[1], c);
}

TEST_F(engineScheduler, EveryStepKeepsTheBudgetAndTheBatchAndServesEveryRunningDecode) {
  make(40, 4, 6, 12);
  std::mt19937 rng(3);
  std::set<RequestId> live;
  for (int i = 0; i < 300; ++i) {
    if (i < 200 && rng() % 3 == 0) live.insert(add(ids(static_cast<int32_t>(rng() % 50), 1 + rng() % 30), 1 + rng() % 20));
    std::vector<RequestId> decoding;  // running sequences with only their last token to compute
    for (RequestId id : live) {
      const Sequence* seq = scheduler_->find(id);
      if (seq && seq->status == SequenceStatus::kRunning && seq->num_computed_tokens == seq->num_tokens() - 1) {
        decoding.push_back(id);
      }
    }
    StepPlan p = scheduler_->schedule();
    EXPECT_LE(p.num_tokens, 12);
    EXPECT_LE(static_cast<int64_t>(p.chunks.size()), 6);
    EXPECT_LE(scheduler_->num_running(), 6);
    int64_t sum = 0;
    for (const auto& chunk : p.chunks) sum += static_cast<int64_t>(chunk.token_ids.size());
    EXPECT_EQ(sum, p.num_tokens);
    if (p.preempted.empty()) {
      for (RequestId id : decoding) EXPECT_NE(chunk_of(p, id), nullptr) << "decode of " << id << " starved at step " << i;
    }
    auto updates = scheduler_->update(p, std::vector<SampleResult>(p.num_sampling(), SampleResult{7, 0.0f, {}}));
    for (const auto& u : updates) {
      if (u.finish) live.erase(u.id);
    }
  }
  EXPECT_TRUE(scheduler_->empty());
  EXPECT_EQ(kv_->stats().used_blocks, 0);
}

TEST_F(engineScheduler, APrefixHitStartsAfterTheCachedBlocks) {
  make(16, 4, 8, 64, /*prefix=*/true);
  auto prompt = ids(0, 10);
  add(prompt);
  step();
  auto second = prompt;
  second.push_back(99);
  RequestId b = add(second);
  StepPlan p = step();
  const ScheduledChunk* cb = chunk_of(p, b);
  ASSERT_NE(cb, nullptr);
  EXPECT_EQ(cb->start_position, 8);  // two full blocks shared
  EXPECT_EQ(cb->token_ids.size(), 3u);
  EXPECT_EQ(kv_->stats().prefix_hit_tokens, 8);
}

TEST_F(engineScheduler, FinishedSequencesLeaveAndFreeTheirBlocks) {
  make(8, 4, 8, 64);
  RequestId a = add(ids(0, 3), /*max_tokens=*/2);
  step();
  EXPECT_NE(scheduler_->find(a), nullptr);
  StepPlan p = scheduler_->schedule();
  auto updates = scheduler_->update(p, {SampleResult{7, 0.0f, {}}});
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].finish, FinishReason::kLength);
  EXPECT_EQ(scheduler_->find(a), nullptr);
  EXPECT_EQ(kv_->stats().used_blocks, 0);
  EXPECT_TRUE(scheduler_->empty());
}

// Prompt logprobs: every prompt token is computed (no cached prefix), with a
// logits row for each, and the step's rows for them are capped for all such
// requests together.
TEST_F(engineScheduler, PromptScoringTakesNoCachedPrefixAndCapsItsRows) {
  make(128, 4, 8, 8192, /*prefix=*/true);
  add(ids(0, 40), 1);
  step();  // its blocks are cached now
  auto scored = [&](std::vector<int32_t> prompt) {
    Request r;
    r.id = next_++;
    r.prompt = std::move(prompt);
    r.max_tokens = 4;
    r.prompt_logprobs = 0;
    scheduler_->add(std::make_unique<Sequence>(r));
    return r.id;
  };
  const RequestId a = scored(ids(0, 40));   // the cached prompt
  const RequestId b = scored(ids(100, 40));
  const RequestId c = add(ids(200, 10));
  const StepPlan p = step();
  const ScheduledChunk* ca = chunk_of(p, a);
  const ScheduledChunk* cb = chunk_of(p, b);
  ASSERT_TRUE(ca && cb && chunk_of(p, c));
  EXPECT_EQ(ca->start_position, 0) << "a scored prompt took a cached prefix";
  EXPECT_TRUE(ca->all_logits && cb->all_logits);
  EXPECT_EQ(ca->token_ids.size(), 40u);
  EXPECT_EQ(cb->token_ids.size(), static_cast<size_t>(kPromptLogitsChunk - 40));
  EXPECT_FALSE(chunk_of(p, c)->all_logits);
  EXPECT_EQ(p.num_logit_rows(), kPromptLogitsChunk + 1);  // a samples from its last scored row; c from its own
}

// n choices of one prompt (Request::shares_prompt_with), prefix caching
// off: the first choice computes the prompt; the others wait a step, letting
// a request behind them in, then start from its full blocks (the same block
// ids, held twice) and compute only the tail.
TEST_F(engineScheduler, ChoicesOfOnePromptComputeItOnce) {
  make(32, 4, 8, 64);
  auto choice = [&](RequestId leader) {
    Request r;
    r.id = next_++;
    r.prompt = ids(0, 10);
    r.shares_prompt_with = leader;
    scheduler_->add(std::make_unique<Sequence>(r));
    return r.id;
  };
  const RequestId a = choice(0);
  const RequestId b = choice(a), c = choice(a);
  const RequestId other = add(ids(50, 6));
  const StepPlan p1 = step();
  ASSERT_NE(chunk_of(p1, a), nullptr);
  EXPECT_EQ(chunk_of(p1, b), nullptr) << "a choice computed the prompt beside its leader";
  EXPECT_EQ(chunk_of(p1, c), nullptr);
  EXPECT_NE(chunk_of(p1, other), nullptr) << "the waiting choices held back the request behind them";
  const StepPlan p2 = step();
  for (RequestId id : {b, c}) {
    const ScheduledChunk* chunk = chunk_of(p2, id);
    ASSERT_NE(chunk, nullptr);
    EXPECT_EQ(chunk->start_position, 8);  // two full blocks of a's
    EXPECT_EQ(chunk->token_ids.size(), 2u);
    EXPECT_TRUE(chunk->sample);
    ASSERT_GE(chunk->block_table.size(), 3u);
    EXPECT_EQ(chunk->block_table[0], kv_->block_table(a)[0]);
    EXPECT_EQ(chunk->block_table[1], kv_->block_table(a)[1]);
    EXPECT_NE(chunk->block_table[2], kv_->block_table(a)[2]) << "the partial block must be a choice's own";
  }
  EXPECT_EQ(kv_->pool().ref_count(kv_->block_table(a)[0]), 3);
  // Without the link the same choices all compute the prompt in the first step.
  make(32, 4, 8, 64);
  const RequestId x = choice(0), y = choice(0);
  const StepPlan q = step();
  ASSERT_TRUE(chunk_of(q, x) && chunk_of(q, y));
  EXPECT_EQ(chunk_of(q, y)->token_ids.size(), 10u);
}

// A choice whose leader is gone (finished or aborted) before its prompt was
// shared computes the prompt itself; one that scores its prompt never waits.
TEST_F(engineScheduler, AChoiceWithoutItsLeaderComputesThePromptItself) {
  make(32, 4, 8, 64);
  Request leader;
  leader.id = next_++;
  leader.prompt = ids(0, 10);
  scheduler_->add(std::make_unique<Sequence>(leader));
  Request r = leader;
  r.id = next_++;
  r.shares_prompt_with = leader.id;
  scheduler_->add(std::make_unique<Sequence>(r));
  Request scoring = r;
  scoring.id = next_++;
  scoring.prompt_logprobs = 0;
  scheduler_->add(std::make_unique<Sequence>(scoring));
  scheduler_->remove(leader.id);
  const StepPlan p = step();
  ASSERT_NE(chunk_of(p, r.id), nullptr);
  EXPECT_EQ(chunk_of(p, r.id)->token_ids.size(), 10u);
  ASSERT_NE(chunk_of(p, scoring.id), nullptr);
  EXPECT_EQ(chunk_of(p, scoring.id)->start_position, 0);
}

}  // namespace
}  // namespace tessera::engine
