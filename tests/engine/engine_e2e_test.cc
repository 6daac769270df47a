// End to end on the real CPU executor: requests batched through the engine
// (chunked prefill, shared prefixes, preemption) give exactly the tokens each
// gives alone through engine::generate — greedy, and seeded sampling with
// truncation and penalties.
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
    SamplingParams p{0.9f, seed};
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
  expect_batched_equals_alone({SamplingParams{}, SamplingParams{0.8f, 5}}, 16);
  EXPECT_GT(stats_.preemptions, 0);
}

}  // namespace
}  // namespace tessera::engine
