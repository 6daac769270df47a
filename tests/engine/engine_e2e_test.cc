// End to end on the real CPU executor: requests batched through the engine
// (chunked prefill, shared prefixes, preemption) give exactly the tokens each
// gives alone through engine::generate — greedy, and seeded sampling with
// truncation and penalties. A prefix-cache hit computes only the suffix, and
// a seed fixes the tokens whether its request runs alone or in a batch.
#include <gtest/gtest.h>

#include <random>

#include "backend/backend.h"
#include "engine/cpu_executor.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/convert/demo_model.h"
#include "model/transformer.h"

namespace tessera::engine {
namespace {

SamplingParams sampling_at(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

class engineEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera-engine-e2e-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    model::RandomLlamaShape shape{64, 2, 4, 2, 96, 97, 256};
    model::write_random_llama(dir_, shape, 11);
    backend_ = backend::make_cpu_backend();
    model_ = model::load_transformer(dir_, *backend_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Prompts of several lengths; two share a long prefix (prefix-cache hits).
  std::vector<std::vector<int32_t>> prompts() const {
    std::mt19937 rng(17);
    std::vector<std::vector<int32_t>> out;
    for (int64_t len : {5, 23, 1, 14, 30, 9}) {
      std::vector<int32_t> p(len);
      for (auto& id : p) id = static_cast<int32_t>(rng() % 97);
      out.push_back(p);
    }
    out.push_back(out[4]);
    out.back().resize(26);
    out.back().push_back(3);
    return out;
  }

  void expect_batched_equals_alone(const std::vector<SamplingParams>& sampling, int64_t num_blocks) {
    const auto ps = prompts();
    const int64_t max_tokens = 12;
    EngineConfig config;
    config.block_size = 4;
    config.num_blocks = num_blocks;
    config.session_len = 64;
    config.scheduler = {4, 16};  // chunked prefill and a queue
    config.enable_prefix_caching = true;
    Engine engine(config, std::make_unique<CpuExecutor>(*model_, num_blocks, config.block_size));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < ps.size(); ++i) {
      Request r;
      r.prompt = ps[i];
      r.sampling = sampling[i % sampling.size()];
      r.max_tokens = max_tokens;
      streams.push_back(engine.submit(r));
    }
    for (size_t i = 0; i < ps.size(); ++i) {
      std::vector<int32_t> batched;
      while (true) {
        auto e = streams[i]->next_for(std::chrono::seconds(60));
        ASSERT_TRUE(e.has_value()) << "request " << i << " stalled";
        if (e->has_token()) batched.push_back(e->token);
        if (e->last()) {
          EXPECT_EQ(e->finish, FinishReason::kLength) << e->error;
          break;
        }
      }
      GenerateOptions alone;
      alone.max_new_tokens = max_tokens;
      alone.sampling = sampling[i % sampling.size()];
      alone.block_size = 4;
      EXPECT_EQ(batched, generate(*model_, ps[i], alone).tokens) << "request " << i;
    }
    stats_ = engine.stats();
  }

  // Runs `requests` together through an engine with 4-token blocks and
  // returns each one's tokens; `plans` (optional) receives every step's plan.
  std::vector<std::vector<int32_t>> run(const std::vector<Request>& requests, bool prefix_caching,
                                        std::vector<StepPlan>* plans = nullptr, bool one_at_a_time = false) {
    class Recording : public CpuExecutor {
     public:
      Recording(model::Transformer& m, std::vector<StepPlan>* out) : CpuExecutor(m, 128, 4), out_(out) {}
      StepOutput execute(const StepPlan& plan) override {
        if (out_) out_->push_back(plan);
        return CpuExecutor::execute(plan);
      }

     private:
      std::vector<StepPlan>* out_;
    };
    EngineConfig config;
    config.block_size = 4;
    config.num_blocks = 128;
    config.session_len = 64;
    config.scheduler = {8, 64};
    config.enable_prefix_caching = prefix_caching;
    Engine engine(config, std::make_unique<Recording>(*model_, plans));
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::vector<std::vector<int32_t>> out(requests.size());
    auto drain = [&](size_t i) {
      while (true) {
        auto e = streams[i]->next_for(std::chrono::seconds(60));
        if (!e) return ADD_FAILURE() << "request " << i << " stalled";
        if (e->has_token()) out[i].push_back(e->token);
        if (e->last()) return;
      }
    };
    for (size_t i = 0; i < requests.size(); ++i) {
      streams.push_back(engine.submit(requests[i]));
      if (one_at_a_time) drain(i);
    }
    if (!one_at_a_time) {
      for (size_t i = 0; i < requests.size(); ++i) drain(i);
    }
    stats_ = engine.stats();
    return out;
  }

  std::filesystem::path dir_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<model::Transformer> model_;
  EngineStats stats_;
};

TEST_F(engineEndToEnd, GreedyBatchedEqualsAlone) {
  expect_batched_equals_alone({SamplingParams{}}, 128);
  EXPECT_GT(stats_.kv.prefix_hit_tokens, 0);
}

TEST_F(engineEndToEnd, SeededSamplingBatchedEqualsAlone) {
  std::vector<SamplingParams> sampling;
  for (uint64_t seed : {1, 2, 3}) {
    SamplingParams p = sampling_at(0.9f, seed);
    p.top_k = static_cast<int32_t>(20 * seed);
    p.top_p = 0.95f;
    p.repetition_penalty = 1.1f;
    p.presence_penalty = 0.2f;
    sampling.push_back(p);
  }
  expect_batched_equals_alone(sampling, 128);
}

TEST_F(engineEndToEnd, PreemptedRequestsStillEqualAlone) {
  // 16 blocks of 4 tokens: the 7 requests (up to 42 tokens each) cannot all hold their blocks.
  expect_batched_equals_alone({SamplingParams{}, sampling_at(0.8f, 5)}, 16);
  EXPECT_GT(stats_.preemptions, 0);
}

TEST_F(engineEndToEnd, APrefixHitComputesOnlyTheSuffixAndChangesNoToken) {
  // Both prompts start with the same 3 blocks (12 tokens); the second request
  // runs after the first has finished and published them.
  std::mt19937 rng(5);
  std::vector<int32_t> shared(12);
  for (auto& id : shared) id = static_cast<int32_t>(rng() % 97);
  Request first, second;
  first.prompt = shared;
  first.prompt.insert(first.prompt.end(), {40, 41, 42});
  second.prompt = shared;
  second.prompt.insert(second.prompt.end(), {7, 8, 9, 10, 11});
  first.max_tokens = second.max_tokens = 8;

  std::vector<StepPlan> plans;
  auto cached = run({first, second}, /*prefix_caching=*/true, &plans, /*one_at_a_time=*/true);
  EXPECT_EQ(stats_.kv.prefix_hit_tokens, 12);
  // The second request (id 2) computed its 5 suffix tokens, then one per decode step.
  int64_t computed = 0, first_position = -1;
  for (const StepPlan& plan : plans) {
    for (const ScheduledChunk& c : plan.chunks) {
      if (c.id != 2) continue;
      if (first_position < 0) first_position = c.start_position;
      computed += static_cast<int64_t>(c.token_ids.size());
    }
  }
  EXPECT_EQ(first_position, 12);
  EXPECT_EQ(computed, 5 + (8 - 1));

  auto uncached = run({first, second}, /*prefix_caching=*/false, nullptr, /*one_at_a_time=*/true);
  EXPECT_EQ(stats_.kv.prefix_hit_tokens, 0);
  EXPECT_EQ(cached, uncached);
  GenerateOptions alone;
  alone.max_new_tokens = 8;
  alone.block_size = 4;
  EXPECT_EQ(cached[1], generate(*model_, second.prompt, alone).tokens);
}

TEST_F(engineEndToEnd, TheSameSeedGivesTheSameTokensAloneAndInABatchOtherSeedsDiffer) {
  auto sampled = [](uint64_t seed, std::vector<int32_t> prompt) {
    Request r;
    r.prompt = std::move(prompt);
    r.sampling = sampling_at(1.0f, seed);
    r.max_tokens = 16;
    return r;
  };
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  const auto alone = run({sampled(7, prompt)}, true)[0];
  // In a batch next to other requests, one with the same prompt and seed and one with another seed.
  const auto batch = run({sampled(1, {9, 9, 9}), sampled(7, prompt), sampled(2, {4, 5, 6, 7, 8, 9, 10, 11, 12}),
                          sampled(7, prompt), sampled(8, prompt)},
                         true);
  ASSERT_EQ(alone.size(), 16u);
  EXPECT_EQ(batch[1], alone);
  EXPECT_EQ(batch[3], alone);
  EXPECT_NE(batch[4], alone);
  EXPECT_NE(run({sampled(8, prompt)}, true)[0], alone);
}

}  // namespace
}  // namespace tessera::engine
