// Prompt logprobs through the Engine against Hugging Face transformers, for
// any backend: every golden fixture's prompt, scored by the engine in 4-token
// chunks, several requests at once in a KV pool small enough to preempt them
// and with prefix caching on, must give each prompt token after the first
// exactly once, with the logprob that log_softmax of transformers' logits at
// the position before gives (tests/fixtures/golden: logits within 2e-3, so
// logprobs within 5e-3). Used by tests/engine (CPU) and tests/cuda.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/cpu_executor.h"
#include "engine/engine.h"
#include "model/transformer.h"

namespace tessera::engine::scoring {

constexpr double kLogprobBound = 5e-3;

// log_softmax(row)[token] in double.
inline double reference_logprob(const std::vector<float>& row, int32_t token) {
  double max_value = row[0];
  for (float v : row) max_value = std::max(max_value, static_cast<double>(v));
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - max_value);
  return static_cast<double>(row[static_cast<size_t>(token)]) - max_value - std::log(sum);
}

struct Scored {
  std::vector<PromptTokenLogprob> prompt;
  int64_t sampled = 0;
};

// Each request's prompt logprobs, three requests at once (two of them with
// the golden prompt, one after the other has filled the prefix cache).
inline std::vector<Scored> score(std::unique_ptr<Executor> executor, const std::vector<int32_t>& prompt, int64_t num_blocks) {
  EngineConfig config;
  config.block_size = 4;
  config.num_blocks = num_blocks;
  config.session_len = 32;
  config.scheduler = {3, 4};  // at most 3 sequences, 4 tokens a step
  config.enable_prefix_caching = true;
  Engine engine(config, std::move(executor));
  // Fill the prefix cache with the prompt first, without prompt logprobs.
  Request warm;
  warm.prompt = prompt;
  warm.max_tokens = 1;
  auto warm_stream = engine.submit(warm);
  while (!warm_stream->next().last()) {
  }
  std::vector<std::vector<int32_t>> prompts = {prompt, prompt, std::vector<int32_t>(prompt.rbegin(), prompt.rend())};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) {
    Request r;
    r.prompt = p;
    r.max_tokens = 8;
    r.prompt_logprobs = 3;
    streams.push_back(engine.submit(r));
  }
  std::vector<Scored> out(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    while (true) {
      auto e = streams[i]->next_for(std::chrono::seconds(120));
      if (!e) {
        ADD_FAILURE() << "request " << i << " stalled";
        break;
      }
      if (!e->prompt_logprobs.empty()) {
        EXPECT_EQ(out[i].sampled, 0) << "prompt logprobs after a sampled token";
        out[i].prompt.insert(out[i].prompt.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
      }
      if (e->has_token()) ++out[i].sampled;
      if (e->last()) {
        EXPECT_EQ(e->finish, FinishReason::kLength) << e->error;
        break;
      }
    }
  }
  EXPECT_GT(engine.stats().preemptions, 0) << "the pool was meant to be too small";
  return out;
}

// The golden fixture `dir`'s prompt scored by `model` (on any backend)
// against transformers' logits; `what` names the case in failures.
inline void expect_prompt_scores_match(model::Transformer& model, const std::filesystem::path& dir,
                                       const std::string& what) {
  nlohmann::json expected = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
  const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  const auto& rows = expected["logits"];
  // 8 blocks of 4 hold 32 tokens; three requests of 11 + 8 need 57.
  const std::vector<Scored> scored = score(std::make_unique<CpuExecutor>(model, 8, 4), prompt, 8);
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<PromptTokenLogprob>& got = scored[i].prompt;
    ASSERT_EQ(got.size(), prompt.size() - 1) << what << " request " << i;
    double worst = 0.0, shifted = 0.0;
    for (size_t k = 1; k < prompt.size(); ++k) {
      const PromptTokenLogprob& t = got[k - 1];
      EXPECT_EQ(t.token, prompt[k]);
      worst = std::max(worst, std::abs(t.logprob - reference_logprob(rows[k - 1].get<std::vector<float>>(), prompt[k])));
      // The row after: what scoring with the wrong position would give.
      if (k < prompt.size() - 1) {
        shifted = std::max(shifted, std::abs(t.logprob - reference_logprob(rows[k].get<std::vector<float>>(), prompt[k])));
      }
      ASSERT_EQ(t.top_logprobs.size(), 3u);
      EXPECT_GE(t.top_logprobs[0].logprob, t.top_logprobs[1].logprob);
      EXPECT_GE(t.top_logprobs[0].logprob + 1e-6, t.logprob);
    }
    EXPECT_LE(worst, kLogprobBound) << what << " request " << i;
    EXPECT_GT(shifted, 20 * kLogprobBound) << what << ": the comparison cannot tell positions apart";
  }
  EXPECT_EQ(scored[2].prompt.size(), prompt.size() - 1);
}

}  // namespace tessera::engine::scoring
