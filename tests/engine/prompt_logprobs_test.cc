// Prompt logprobs (Request::prompt_logprobs) through the Engine on the CPU
// backend against transformers (prompt_scoring.h says what is checked), and
// over two tensor-parallel ranks against one.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../test_paths.h"
#include "prompt_scoring.h"
#include "engine/cpu_executor.h"
#include "engine/engine.h"
#include "engine/tp_executor.h"
#include "model/transformer.h"

namespace tessera::engine {
namespace {

using scoring::Scored;
using scoring::score;

class PromptLogprobs : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(PromptLogprobs, EqualTransformersLogSoftmaxOnceEach) {
  const std::filesystem::path dir = GetParam();
  if (dir.filename() == "llama_rope_dynamic") {
    GTEST_SKIP() << "dynamic NTK rescales RoPE by the length at the time a token is computed: chunked scores differ "
                    "from transformers' one forward by design";
  }
  auto backend = backend::make_cpu_backend();
  auto model = model::load_transformer(dir, *backend);
  scoring::expect_prompt_scores_match(*model, dir, dir.filename().string());
}

// Over two tensor-parallel CPU ranks (vocabulary-parallel LM head, logits
// gathered) the scores equal one rank's.
TEST(PromptLogprobsTp, TwoRanksScoreAsOne) {
  const auto cases = testing::golden_cases();
  ASSERT_FALSE(cases.empty());
  const std::filesystem::path dir = cases.front();
  nlohmann::json expected = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
  const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  auto backend = backend::make_cpu_backend();
  auto model = model::load_transformer(dir, *backend);
  const std::vector<Scored> one = score(std::make_unique<CpuExecutor>(*model, 8, 4), prompt, 8);
  TpExecutorConfig config;
  config.tp = 2;
  config.num_blocks = 8;
  config.block_size = 4;
  config.comm_timeout = std::chrono::seconds(60);
  const model::HostModel host = model::read_host_model(dir);
  const std::vector<Scored> two = score(std::make_unique<TpExecutor>(host, config), prompt, 8);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].prompt.size(), two[i].prompt.size());
    for (size_t k = 0; k < one[i].prompt.size(); ++k) {
      EXPECT_EQ(one[i].prompt[k].token, two[i].prompt[k].token);
      EXPECT_NEAR(one[i].prompt[k].logprob, two[i].prompt[k].logprob, 1e-4) << dir.filename() << " " << i << " " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, PromptLogprobs, ::testing::ValuesIn(testing::golden_cases()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace tessera::engine
