// The engine loop against the fake executor: finish reasons (stop ids, eos,
// ignore_eos, min_tokens, max_tokens, session length), abort, many requests at
// once, statistics, and fault isolation through an injected failure.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "even_ids_constraint.h"
#include "fake_executor.h"

namespace tessera::engine {
namespace {

using testing::EvenIds;
using testing::FakeExecutor;

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<TokenEvent> events;
  TokenEvent last;
};

Collected collect(RequestStream& stream) {
  Collected c;
  while (true) {
    auto e = stream.next_for(std::chrono::seconds(20));
    if (!e) {
      ADD_FAILURE() << "no event within 20 s";
      return c;
    }
    if (e->has_token()) c.tokens.push_back(e->token);
    c.events.push_back(*e);
    if (e->last()) {
      c.last = *e;
      return c;
    }
  }
}

EngineConfig small_config() {
  EngineConfig config;
  config.block_size = 4;
  config.num_blocks = 64;
  config.session_len = 64;
  config.scheduler = {8, 16};
  config.eos_ids = {2};
  return config;
}

Request request(std::vector<int32_t> prompt, int64_t max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

TEST(engineLoop, CountsUpToMaxTokensThenFinishesWithLength) {
  auto fake = std::make_unique<FakeExecutor>();
  Engine engine(small_config(), std::move(fake));
  auto s = engine.submit(request({5, 6}, 4));
  Collected c = collect(*s);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{7, 8, 9, 10}));
  EXPECT_EQ(c.last.finish, FinishReason::kLength);
}

TEST(engineLoop, StopIdsAndEosStopAndIgnoreEosDoesNot) {
  Engine engine(small_config(), std::make_unique<FakeExecutor>());
  Request stop = request({5}, 10);
  stop.stop_ids = {8};
  Collected c = collect(*engine.submit(stop));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{6, 7, 8}));  // the stop token is the last token
  EXPECT_EQ(c.last.finish, FinishReason::kStop);

  c = collect(*engine.submit(request({0}, 10)));  // 1, then eos 2
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(c.last.finish, FinishReason::kStop);

  Request ignore = request({0}, 4);
  ignore.ignore_eos = true;
  c = collect(*engine.submit(ignore));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(c.last.finish, FinishReason::kLength);
}

TEST(engineLoop, MinTokensMasksEosAndStopIdsUntilReached) {
  Engine engine(small_config(), std::make_unique<FakeExecutor>());
  Request r = request({1}, 10);  // the fake wants eos (2) first
  r.min_tokens = 2;
  Collected c = collect(*engine.submit(r));
  // Step 1: eos masked -> runner-up 3. Step 2: 4. Then min_tokens is met.
  EXPECT_EQ(c.tokens.front(), 3);
  EXPECT_EQ(c.tokens.size(), 10u);  // counting upwards from 3 never meets eos again before 10 tokens
  r = request({30}, 10);            // 31, 0 (vocab 32), then eos 2 is allowed
  r.min_tokens = 3;
  c = collect(*engine.submit(r));
  // 31, 0, then 1 -> next would be 2 (eos) at output 4 >= min_tokens.
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{31, 0, 1, 2}));
  EXPECT_EQ(c.last.finish, FinishReason::kStop);
}

TEST(engineLoop, SessionLengthEndsTheSequenceWithLength) {
  EngineConfig config = small_config();
  config.session_len = 6;
  Engine engine(config, std::make_unique<FakeExecutor>());
  Collected c = collect(*engine.submit(request({10, 11, 12}, 100)));
  EXPECT_EQ(c.tokens.size(), 3u);  // 3 prompt + 3 new = the session length
  EXPECT_EQ(c.last.finish, FinishReason::kLength);
  EXPECT_THROW(engine.submit(request({1, 2, 3, 4, 5, 6}, 1)), Error);  // a prompt that fills the session
}

TEST(engineLoop, LogprobsTravelWithTheTokens) {
  Engine engine(small_config(), std::make_unique<FakeExecutor>());
  Request r = request({3}, 1);
  r.logprobs = true;
  r.top_logprobs = 2;
  Collected c = collect(*engine.submit(r));
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_LT(c.events[0].logprob, 0.0f);
  EXPECT_GT(c.events[0].logprob, -0.01f);  // 10 vs 5 vs zeros: nearly certain
  ASSERT_EQ(c.events[0].top_logprobs.size(), 2u);
  EXPECT_EQ(c.events[0].top_logprobs[1].token, 5);
}

TEST(engineLoop, ManyRequestsAtOnceEachGetTheirOwnTokens) {
  EngineConfig config = small_config();
  config.num_blocks = 24;  // not all 20 fit at once: preemption and queuing happen
  config.session_len = 24;
  auto fake = std::make_unique<FakeExecutor>();
  FakeExecutor* raw = fake.get();
  Engine engine(config, std::move(fake));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 20; ++i) {
    Request r = request(std::vector<int32_t>(3 + i % 5, 3), 12);
    r.ignore_eos = true;
    streams.push_back(engine.submit(r));
  }
  for (auto& s : streams) {
    Collected c = collect(*s);
    ASSERT_EQ(c.tokens.size(), 12u);
    for (int k = 0; k < 12; ++k) EXPECT_EQ(c.tokens[k], (4 + k) % 32);
    EXPECT_EQ(c.last.finish, FinishReason::kLength);
  }
  EngineStats stats = engine.stats();
  EXPECT_EQ(stats.finished_requests, 20);
  EXPECT_EQ(stats.generated_tokens, 20 * 12);
  EXPECT_EQ(stats.running + stats.waiting, 0);
  EXPECT_EQ(stats.kv.used_blocks, 0);
  EXPECT_GT(stats.preemptions, 0);  // the pool was too small for all of them
  std::lock_guard lock(raw->mutex);
  for (const StepPlan& p : raw->plans) {
    EXPECT_LE(p.num_tokens, 16);
    EXPECT_LE(static_cast<int64_t>(p.chunks.size()), 8);
  }
}

TEST(engineLoop, AbortEndsARequestAndFreesItsBlocks) {
  auto fake = std::make_unique<FakeExecutor>();
  fake->before_step = [](const StepPlan&) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  Engine engine(small_config(), std::move(fake));
  Request r = request({1, 2, 3}, 1000);
  r.ignore_eos = true;
  auto s = engine.submit(r);
  ASSERT_TRUE(s->next_for(std::chrono::seconds(20)).has_value());  // it is running
  engine.abort(s->id());
  Collected c = collect(*s);
  EXPECT_EQ(c.last.finish, FinishReason::kAbort);
  for (int i = 0; i < 100 && engine.stats().kv.used_blocks != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine.stats().kv.used_blocks, 0);
  EXPECT_EQ(engine.stats().running, 0);
}

TEST(engineLoop, AFailedStepFailsItsRequestsAndTheLoopGoesOn) {
  auto fake = std::make_unique<FakeExecutor>();
  // Any step that carries prompt token 13 throws.
  fake->before_step = [](const StepPlan& plan) {
    for (const auto& c : plan.chunks) {
      if (c.start_position == 0 && c.token_ids[0] == 13) throw std::runtime_error("injected fault");
    }
  };
  Engine engine(small_config(), std::move(fake));
  Collected bad = collect(*engine.submit(request({13, 14}, 3)));
  EXPECT_EQ(bad.last.finish, FinishReason::kError);
  EXPECT_EQ(bad.last.error, "injected fault");
  EXPECT_TRUE(bad.tokens.empty());
  Collected good = collect(*engine.submit(request({20}, 3)));
  EXPECT_EQ(good.tokens, (std::vector<int32_t>{21, 22, 23}));
  EXPECT_TRUE(engine.healthy());
  EXPECT_EQ(engine.stats().failed_requests, 1);
  EXPECT_EQ(engine.stats().kv.used_blocks, 0);
}

TEST(engineLoop, ADeviceFailureEndsEverythingAndMarksTheEngineUnhealthy) {
  auto fake = std::make_unique<FakeExecutor>();
  std::atomic<bool> fail{false};
  fake->before_step = [&](const StepPlan&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (fail) throw Error(ErrorKind::kDeviceFailure, "injected: the device is lost");
  };
  Engine engine(small_config(), std::move(fake));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    Request r = request({3, 4}, 1000);
    r.ignore_eos = true;
    streams.push_back(engine.submit(r));
  }
  ASSERT_TRUE(streams[0]->next_for(std::chrono::seconds(20)).has_value());
  fail = true;
  for (auto& s : streams) {
    Collected c = collect(*s);
    EXPECT_EQ(c.last.finish, FinishReason::kError);
    EXPECT_EQ(c.last.error_kind, ErrorKind::kDeviceFailure);
  }
  EXPECT_FALSE(engine.healthy());
  EXPECT_FALSE(engine.stats().healthy);
  Collected late = collect(*engine.submit(request({1}, 1)));
  EXPECT_EQ(late.last.finish, FinishReason::kError);
  EXPECT_EQ(late.last.error_kind, ErrorKind::kDeviceFailure);
}

TEST(engineLoop, DestructionAbortsWhatIsInFlight) {
  std::shared_ptr<RequestStream> s;
  {
    auto fake = std::make_unique<FakeExecutor>();
    fake->before_step = [](const StepPlan&) { std::this_thread::sleep_for(std::chrono::milliseconds(1)); };
    Engine engine(small_config(), std::move(fake));
    Request r = request({1}, 1000);
    r.ignore_eos = true;
    s = engine.submit(r);
  }
  EXPECT_TRUE(s->finished());
  Collected c = collect(*s);
  EXPECT_EQ(c.last.finish, FinishReason::kAbort);
}

// Waits until the engine holds no request and returns its statistics.
EngineStats idle_stats(Engine& engine) {
  for (int i = 0; i < 2000; ++i) {
    EngineStats s = engine.stats();
    if (s.running + s.waiting == 0 && s.kv.used_blocks == 0) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return engine.stats();
}

TEST(engineLoop, EveryBlockIsBackInThePoolAfterStopLengthAbortAndError) {
  for (bool prefix_caching : {false, true}) {
    EngineConfig config = small_config();
    config.num_blocks = 16;
    config.enable_prefix_caching = prefix_caching;
    auto fake = std::make_unique<FakeExecutor>();
    // Slow enough steps for the abort to land first; a chunk computing token 13
    // at an early position fails its step.
    fake->before_step = [](const StepPlan& plan) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      for (const auto& c : plan.chunks) {
        if (c.token_ids[0] == 13 && c.start_position < 8) throw std::runtime_error("injected fault");
      }
    };
    Engine engine(config, std::move(fake));
    auto expect_all_free = [&](const char* after) {
      EngineStats s = idle_stats(engine);
      EXPECT_EQ(s.kv.used_blocks, 0) << after << (prefix_caching ? " (prefix caching)" : "");
      EXPECT_EQ(s.kv.free_blocks, 16) << after << (prefix_caching ? " (prefix caching)" : "");
    };
    Collected stop = collect(*engine.submit(request(std::vector<int32_t>(9, 20), 100)));  // ... 31, 0, 1, eos 2
    EXPECT_EQ(stop.last.finish, FinishReason::kStop);
    expect_all_free("stop");
    Collected length = collect(*engine.submit(request(std::vector<int32_t>(10, 3), 6)));
    EXPECT_EQ(length.last.finish, FinishReason::kLength);
    expect_all_free("length");
    Request long_one = request(std::vector<int32_t>(11, 4), 1000);
    long_one.ignore_eos = true;
    auto aborted = engine.submit(long_one);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(aborted->next_for(std::chrono::seconds(20)).has_value());
    engine.abort(aborted->id());
    EXPECT_EQ(collect(*aborted).last.finish, FinishReason::kAbort);
    expect_all_free("abort");
    // Fails at its third step, mid-decode (12, 13, then the step computing 13 throws).
    Collected failed = collect(*engine.submit(request({9, 10, 11}, 50)));
    EXPECT_EQ(failed.tokens, (std::vector<int32_t>{12, 13}));
    EXPECT_EQ(failed.last.finish, FinishReason::kError);
    EXPECT_EQ(failed.last.error, "injected fault");
    expect_all_free("error");
  }
}

TEST(engineLoop, InvalidConfigAndRequestsAreRefused) {
  EngineConfig config = small_config();
  config.session_len = 1000;  // more than 64 blocks x 4 tokens
  EXPECT_THROW(Engine(config, std::make_unique<FakeExecutor>()), Error);
  Engine engine(small_config(), std::make_unique<FakeExecutor>());
  EXPECT_THROW(engine.submit(request({}, 1)), Error);
  EXPECT_THROW(engine.submit(request({99}, 1)), Error);  // outside the vocabulary of 32
  Request r = request({1}, 1);
  r.sampling.top_p = 2.0f;
  EXPECT_THROW(engine.submit(r), Error);
}

}  // namespace
}  // namespace tessera::engine

namespace tessera::engine {
namespace {

// Sixteen sampling requests in one step are sampled on OpenMP's threads
// (sample_step.cc: 8 rows or more of a vocabulary of 4096 or more); each must
// still draw what it draws alone, its generator advancing only on its own rows.
TEST(engineLoop, RowsSampledOnThreadsGiveTheTokensOfEachRequestAlone) {
  constexpr int kRequests = 16;
  auto sampling_request = [](int i) {
    Request r = request({static_cast<int32_t>(100 + i)}, 24);
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = static_cast<uint64_t>(1000 + i);
    r.ignore_eos = true;
    return r;
  };
  EngineConfig config = small_config();
  config.num_blocks = 256;
  config.scheduler = {kRequests, 256};
  std::vector<std::vector<int32_t>> together(kRequests), alone(kRequests);
  {
    auto fake = std::make_unique<FakeExecutor>(8192);
    FakeExecutor* executor = fake.get();
    Engine engine(config, std::move(fake));
    // Hold the first step until every request is in, so they decode together.
    std::atomic<bool> release{false};
    executor->before_step = [&](const StepPlan&) {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < kRequests; ++i) streams.push_back(engine.submit(sampling_request(i)));
    release = true;
    for (int i = 0; i < kRequests; ++i) together[i] = collect(*streams[i]).tokens;
    int64_t widest = 0;
    {
      std::lock_guard lock(executor->mutex);
      for (const StepPlan& plan : executor->plans) widest = std::max(widest, plan.num_sampling());
    }
    EXPECT_GE(widest, 8) << "no step sampled enough rows to take the threads";
  }
  for (int i = 0; i < kRequests; ++i) {
    Engine engine(config, std::make_unique<FakeExecutor>(8192));
    alone[i] = collect(*engine.submit(sampling_request(i))).tokens;
    EXPECT_EQ(together[i], alone[i]) << "request " << i;
  }
  std::set<int32_t> distinct;
  for (const auto& t : together) distinct.insert(t.begin(), t.end());
  EXPECT_GT(distinct.size(), 32u) << "the draws hardly vary: the comparison would prove little";
}

TEST(engineLoop, AConstraintMasksTheTokensItDoesNotAllowAndEndsTheOutputWhenDone) {
  Engine engine(small_config(), std::make_unique<FakeExecutor>());
  // The fake's likeliest token is last + 1, its runner-up last + 2: an odd
  // likeliest is masked and the even runner-up taken.
  Request r = request({5}, 10);
  r.constraint = std::make_shared<EvenIds>(3, 5);
  Collected c = collect(*engine.submit(r));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{6, 8, 10, 12, 14}));
  EXPECT_EQ(c.last.finish, FinishReason::kStop);
  EXPECT_FALSE(c.last.stop_token);  // the last token is part of the output

  // Where the output may end, eos (the likeliest after 1) is allowed.
  r = request({1}, 10);
  r.constraint = std::make_shared<EvenIds>(0, 5);
  c = collect(*engine.submit(r));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{2}));
  EXPECT_TRUE(c.last.stop_token);
  // Where it may not, eos and the odd runner-up are masked: the lowest even
  // id of logit 0 (0), until three are taken and eos (the runner-up after 0) may come.
  r = request({1}, 10);
  r.constraint = std::make_shared<EvenIds>(3, 8);
  c = collect(*engine.submit(r));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{0, 0, 0, 2}));
  EXPECT_TRUE(c.last.stop_token);
}

}  // namespace
}  // namespace tessera::engine
