// Greedy ids from the executor instead of logits (StepOutput::token_ids): the
// engine marks which sampling chunks are plain greedy (mark_greedy_chunks), an
// executor may then return argmax ids, and the tokens are the ones the logits
// path gives. Penalties, temperature, logprobs and min_tokens masks keep a
// chunk on the logits path.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/sample_step.h"
#include "fake_executor.h"

namespace tessera::engine {
namespace {

using testing::FakeExecutor;

// The fake's logits, or, when every sampling chunk is greedy, their argmax ids
// ((last + 1) % vocab) — deliberately wrong by one when `plant` is set.
class IdsExecutor : public FakeExecutor {
 public:
  StepOutput execute(const StepPlan& plan) override {
    bool all_greedy = plan.num_sampling() > 0;
    for (const ScheduledChunk& c : plan.chunks) all_greedy = all_greedy && (!c.sample || c.greedy);
    if (!all_greedy) {
      ++logits_steps;
      return FakeExecutor::execute(plan);
    }
    ++ids_steps;
    StepOutput out;
    for (const ScheduledChunk& c : plan.chunks) {
      if (c.sample) out.token_ids.push_back((c.token_ids.back() + 1 + (plant ? 1 : 0)) % vocab_size());
    }
    return out;
  }
  int ids_steps = 0, logits_steps = 0;
  bool plant = false;
};

EngineConfig config() {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = 64;
  c.session_len = 64;
  c.scheduler = {8, 16};
  c.eos_ids = {2};
  return c;
}

std::vector<int32_t> run(Request r, IdsExecutor** seen, bool plant = false) {
  auto executor = std::make_unique<IdsExecutor>();
  executor->plant = plant;
  *seen = executor.get();
  Engine engine(config(), std::move(executor));
  auto stream = engine.submit(r);
  std::vector<int32_t> tokens;
  while (true) {
    TokenEvent e = stream->next();
    if (e.has_token()) tokens.push_back(e.token);
    if (e.last()) break;
  }
  engine.stop();
  return tokens;
}

Request request(int64_t max_tokens) {
  Request r;
  r.prompt = {5, 6};
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

TEST(GreedyIds, PlainGreedyStepsTakeIdsAndGiveTheLogitsTokens) {
  IdsExecutor* seen = nullptr;
  const std::vector<int32_t> tokens = run(request(5), &seen);
  EXPECT_EQ(tokens, (std::vector<int32_t>{7, 8, 9, 10, 11}));  // what the fake's logits give
  EXPECT_EQ(seen->logits_steps, 0);
  EXPECT_EQ(seen->ids_steps, 5);
}

TEST(GreedyIds, APlantedWrongIdChangesTheTokens) {
  IdsExecutor* seen = nullptr;
  EXPECT_NE(run(request(5), &seen, true), (std::vector<int32_t>{7, 8, 9, 10, 11}));
}

TEST(GreedyIds, AnythingButPlainGreedyKeepsTheLogits) {
  std::vector<Request> cases(4, request(3));
  cases[0].sampling.repetition_penalty = 1.2f;
  cases[1].logprobs = true;
  cases[2].sampling.temperature = 0.7f;
  cases[3].ignore_eos = false;
  cases[3].min_tokens = 2;  // eos masked for the first two tokens only
  for (size_t i = 0; i < cases.size(); ++i) {
    IdsExecutor* seen = nullptr;
    run(cases[i], &seen);
    if (i < 3) {
      EXPECT_EQ(seen->ids_steps, 0) << "case " << i;
    } else {
      EXPECT_EQ(seen->logits_steps, 2) << "min_tokens masks the first two steps";
      EXPECT_EQ(seen->ids_steps, 1);
    }
  }
}

}  // namespace
}  // namespace tessera::engine
