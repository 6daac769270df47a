// The tokens an engine draws for a fixed set of requests: ten at once, two
// greedy and six seeded (top_k, top_p and penalties on some), twelve tokens
// each, and two (one greedy, one seeded) under a scripted structured output
// of even ids that is done after eight. The CUDA sampling tests run it with sampling on the device and with
// host logits (TESSERA_GPU_SAMPLING=0), which must draw the same tokens.
#pragma once

#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/executor.h"
#include "../engine/even_ids_constraint.h"

namespace tessera::testing {

struct EngineTokens {
  std::vector<std::vector<int32_t>> tokens;  // per request, in submission order
  bool sampled_on_device = false;            // the executor's samples_on_device()
};

// `make_executor` is called with TESSERA_GPU_SAMPLING set for the run (unset
// for device sampling, "0" for host logits) and gets the engine's block
// count and size.
inline EngineTokens engine_tokens(
    const std::function<std::unique_ptr<engine::Executor>(int64_t num_blocks, int64_t block_size)>& make_executor,
    bool device_sampling) {
  if (device_sampling) unsetenv("TESSERA_GPU_SAMPLING");
  else setenv("TESSERA_GPU_SAMPLING", "0", 1);
  engine::EngineConfig config;
  config.block_size = 4;
  config.num_blocks = 256;
  config.session_len = 64;
  config.scheduler = {8, 64};
  EngineTokens run;
  {
    std::unique_ptr<engine::Executor> executor = make_executor(config.num_blocks, config.block_size);
    run.sampled_on_device = executor->samples_on_device();
    engine::Engine engine(config, std::move(executor));
    std::vector<std::shared_ptr<engine::RequestStream>> streams;
    for (int i = 0; i < 10; ++i) {
      engine::Request r;
      r.prompt = {1, static_cast<int32_t>(3 + i), static_cast<int32_t>(7 + 2 * i)};
      r.max_tokens = 12;
      r.ignore_eos = true;
      if (i >= 2 && i != 8) {  // seeded sampling, with penalties on some
        r.sampling.temperature = 0.9f;
        r.sampling.seed = 100 + i;
        r.sampling.top_k = i % 3 == 0 ? 20 : 0;
        r.sampling.top_p = i % 2 == 0 ? 0.9f : 1.0f;
        if (i >= 6) r.sampling.repetition_penalty = 1.2f;
        if (i == 7) r.sampling.frequency_penalty = 0.5f;
      }
      if (i >= 8) r.constraint = std::make_shared<engine::testing::EvenIds>(4, 8);
      streams.push_back(engine.submit(r));
    }
    for (auto& s : streams) {
      run.tokens.emplace_back();
      while (true) {
        engine::TokenEvent e = s->next();
        if (e.has_token()) run.tokens.back().push_back(e.token);
        if (e.last()) break;
      }
    }
  }
  unsetenv("TESSERA_GPU_SAMPLING");
  return run;
}

}  // namespace tessera::testing
